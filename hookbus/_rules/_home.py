"""The home a public name shows: the face that exports it, not the private module that defines it."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping

__all__ = ["FACES", "show_home"]

#: The faces, one per audience, in the order that picks a home: a name two faces export shows the
#: first (a name people who train use shows ``hookbus``, though sink authors use it too).
FACES = ("hookbus", "hookbus.sink_api", "hookbus.publisher_api", "hookbus.testing", "hookbus.validate")


def show_home(face: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Make ``repr`` and ``help`` name ``face`` as the module of each class and function of ``names``
    (looked up in ``namespace``, the face's globals): ``help(hookbus.EventBus)`` then says
    ``hookbus.EventBus``, never ``hookbus._bus._bus``. A name a face ahead of ``face`` in
    :data:`FACES` has already claimed keeps that home, whichever face is imported first.
    Constants (a tuple, a number) have no module and are left alone."""
    rank = FACES.index(face)
    for name in names:
        obj = namespace[name]
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if obj.__module__ in FACES and FACES.index(obj.__module__) < rank:
            continue
        obj.__module__ = face
