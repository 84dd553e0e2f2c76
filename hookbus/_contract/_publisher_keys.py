"""The names a publisher publishes under: its modes, the key prefixes and the check its keys pass.

:class:`hookbus.publisher_api.PublisherCore` checks its keys here; the Keras callback and the loop publisher
check their own fetch keys with :func:`check_fetch_keys` before they build a core.
"""

from __future__ import annotations

from collections.abc import Iterable

from hookbus._rules._validate import key_items, key_name

__all__ = ["EPOCH_PREFIX", "EVAL_PREFIX", "MODES", "RESERVED_KEYS", "TEST_PREFIX", "check_fetch_keys", "check_mode"]

#: A publisher's modes: ``"train"`` (scheduled steps), ``"eval"`` (fit's validation, an eval hook's
#: evaluation) and ``"test"`` (a test evaluation: ``model.evaluate`` outside ``fit``, see
#: :class:`hookbus.EventBusCallback`).
MODES = ("train", "eval", "test")
EVAL_PREFIX = "eval/"
#: Prefix of a test evaluation's keys (``test/loss``): ``model.evaluate`` outside ``fit``, published
#: once per evaluation (``mode="test"``) at the training step, apart from validation's ``eval/`` keys.
TEST_PREFIX = "test/"
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
        if key.startswith((EVAL_PREFIX, TEST_PREFIX)):
            prefix, mode = (EVAL_PREFIX, "eval") if key.startswith(EVAL_PREFIX) else (TEST_PREFIX, "test")
            raise ValueError(
                f"fetch key {key!r} must not start with {prefix!r}; a publisher in mode={mode!r} "
                "adds that prefix itself"
            )
        checked.append(key)
    return tuple(checked)


def check_mode(mode: object, allowed: tuple[str, ...] = MODES) -> str:
    """``mode`` if it is one of ``allowed`` (default :data:`MODES`); else a ``ValueError`` naming it."""
    if mode not in allowed:
        names = [repr(m) for m in allowed]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise ValueError(f"mode must be {listed} (got {mode!r})")
    return str(mode)
