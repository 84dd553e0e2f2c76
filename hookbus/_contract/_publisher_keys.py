"""The names a publisher publishes under: its modes, the key prefixes and the check its keys pass.

:class:`hookbus.publisher_api.PublisherCore` checks its keys here; the Keras callback and the loop publisher
check their own fetch keys with :func:`check_fetch_keys` before they build a core.
"""

from __future__ import annotations

from collections.abc import Iterable

from hookbus._rules._validate import key_items, key_name

__all__ = ["EPOCH_PREFIX", "EVAL_PREFIX", "MODES", "RESERVED_KEYS", "check_fetch_keys", "check_mode"]

MODES = ("train", "eval")
EVAL_PREFIX = "eval/"
#: Prefix of the Keras callback's epoch-level keys (``epoch/loss``); such events have mode ``"epoch"``
#: and reach only subscribers that opt in (see :class:`hookbus.EventBusCallback`).
EPOCH_PREFIX = "epoch/"
#: Names that sinks use for their own columns; a fetch key may not take them.
RESERVED_KEYS = frozenset({"step", "wall_time", "mode", "elapsed"})


def check_fetch_keys(keys: str | Iterable[object], name: str = "keys") -> tuple[str, ...]:
    """Validate publisher keys: names (:func:`hookbus._rules._validate.key_name`), not reserved, no ``eval/`` prefix.

    A ``str`` is one key (``keys="loss"``), as in every sink's ``keys=``; never its characters.
    """
    checked: list[str] = []
    for key in key_items(name, keys):
        if not isinstance(key, str) or not key:
            raise ValueError(f"fetch keys must be non-empty strings (got {key!r})")
        key_name("fetch key", key)
        if key in RESERVED_KEYS:
            raise ValueError(
                f"fetch key {key!r} is reserved (reserved: {sorted(RESERVED_KEYS)}); rename it, e.g. {key + '_value'!r}"
            )
        if key.startswith(EVAL_PREFIX):
            raise ValueError(
                f"fetch key {key!r} must not start with {EVAL_PREFIX!r}; an eval publisher "
                "(mode='eval') adds that prefix itself"
            )
        checked.append(key)
    return tuple(checked)


def check_mode(mode: object) -> str:
    """``mode`` if it is ``"train"`` or ``"eval"``; else a ``ValueError`` naming it."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'train' or 'eval' (got {mode!r})")
    return str(mode)
