"""``help()`` on every public name reads as documentation of the public surface (issue 46 item 3).

It never sends the reader to a private module (``hookbus._bus._subscription``, ``hookbus.sinks._monitor``):
not as the module a class or function is "in", not in a base class, not in a docstring, not in a default
value's repr. And it never prints a sentinel's address (``every_n_secs = <object object at 0x7f...>``).
"""

from __future__ import annotations

import importlib
import inspect
import pydoc
import re
import sys

import pytest

import hookbus.sinks  # noqa: F401 - the paths the check resolves are imported

#: Every public module: the faces, one per audience, and the sinks.
FACES = ("hookbus", "hookbus.sink_api", "hookbus.publisher_api", "hookbus.testing", "hookbus.validate", "hookbus.sinks")
_DOTTED = re.compile(r"\bhookbus(?:\.\w+)+")


def _public_names() -> list[str]:
    return [f"{face}.{name}" for face in FACES for name in importlib.import_module(face).__all__]


def private_modules_named(text: str) -> list[str]:
    """The dotted paths in ``text`` that go through a private module of hookbus's (``hookbus._bus``,
    ``hookbus.sinks._monitor.Monitor``), or a private name hookbus does not have. A private class of a
    public module (``hookbus.sinks.learning_rate.learning_rate._RateSink``, a base pydoc shows by its
    path like any other) is no module: the path stops being checked there."""
    found = []
    for path in _DOTTED.findall(text):
        parts = path.split(".")
        for i, part in enumerate(parts[1:], start=1):
            if not part.startswith("_") or part.startswith("__"):
                continue
            parent = sys.modules.get(".".join(parts[:i]))
            named = getattr(parent, part, None)
            if parent is None or named is None or inspect.ismodule(named):
                found.append(path)
            break
    return sorted(set(found))


def help_text(obj: object) -> str:
    """What ``help(obj)`` prints (``pydoc``'s text, its bold overstrikes removed)."""
    return pydoc.plain(pydoc.render_doc(obj))


def _documented(obj: object) -> object | None:
    """What ``help(obj)`` documents: a module, class or routine itself; data of a hookbus class, its
    class; other data (a str, a tuple of names, a number) documents a builtin type, not hookbus."""
    if inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj):
        return obj
    kind = type(obj)
    return kind if kind.__module__.split(".")[0] == "hookbus" else None


def test_the_check_finds_what_it_looks_for() -> None:
    text = (
        "see :mod:`hookbus._tf.keras._resume`; hookbus.sinks._monitor.resolve_direction;"
        " hookbus.sink_api.Sink; class X(hookbus.sinks.learning_rate.learning_rate._RateSink); hookbus._gone"
    )
    private = ["hookbus._gone", "hookbus._tf.keras._resume", "hookbus.sinks._monitor.resolve_direction"]
    assert private_modules_named(text) == private


@pytest.mark.parametrize("face", FACES)
def test_help_on_a_face_names_no_private_module(face: str) -> None:
    text = help_text(importlib.import_module(face))
    assert private_modules_named(text) == []
    assert "object object at" not in text


@pytest.mark.parametrize("name", _public_names())
def test_help_on_a_public_name_names_no_private_module_and_no_sentinel(name: str) -> None:
    face, _, attribute = name.rpartition(".")
    obj = _documented(getattr(importlib.import_module(face), attribute))
    if obj is None:
        return  # help() on a str or tuple constant documents str or tuple
    text = help_text(obj)
    assert private_modules_named(text) == [], name
    assert "object object at" not in text, name


def test_a_name_two_faces_export_shows_the_first_as_its_home() -> None:
    """Every class and function a face exports shows one face as its module: the first in the faces'
    order that exports it (``hookbus.Event``, not ``hookbus.sink_api.Event``; ``CheckpointStore``, in
    both authors' faces, shows ``hookbus.sink_api``), whichever face was imported first."""
    faces = [importlib.import_module(face) for face in FACES[:5]]  # hookbus.sinks defines its own
    checked = 0
    for face in faces:
        for name in face.__all__:
            obj = getattr(face, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                first = next(f for f in faces if getattr(f, name, None) is obj)
                assert obj.__module__ == first.__name__, (face.__name__, name, obj.__module__)
                checked += 1
    assert checked > 90
