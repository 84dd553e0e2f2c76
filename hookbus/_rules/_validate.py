"""The argument checks every constructor shares, with one message shape for all of them.

Every check raises ``ValueError`` naming the argument, what was expected and the value given:
``every_n_steps must be a positive int (got 0)``. Numbers are never bools; counts are never
floats; seconds and rates are finite (``inf`` and ``nan`` fail here, not as an ``OverflowError``
on a writer's thread hours later).
"""

from __future__ import annotations

import math
import os
import re
import signal
from collections.abc import Iterable

__all__ = [
    "check_stop_signals",
    "finite_number",
    "flag",
    "flag_or_directory",
    "key_items",
    "key_name",
    "non_empty_path",
    "non_negative_int",
    "non_negative_seconds",
    "one_of",
    "optional_positive_int",
    "optional_seconds",
    "positive_int",
    "positive_number",
    "seconds",
]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int above 0; else ``ValueError`` naming ``name``."""
    if not _is_int(value) or value < 1:  # type: ignore[operator]
        raise ValueError(f"{name} must be a positive int (got {value!r})")
    return value  # type: ignore[return-value]


def optional_positive_int(name: str, value: object) -> int | None:
    """``None``, or ``value`` if it is an int above 0."""
    if value is None:
        return None
    if not _is_int(value) or value < 1:  # type: ignore[operator]
        raise ValueError(f"{name} must be a positive int or None (got {value!r})")
    return value  # type: ignore[return-value]


def non_negative_int(name: str, value: object) -> int:
    """``value`` if it is an int of 0 or more."""
    if not _is_int(value) or value < 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a non-negative int (got {value!r})")
    return value  # type: ignore[return-value]


def positive_number(name: str, value: object) -> float:
    """``value`` as a float if it is a finite int or float above 0 (a rate, a size)."""
    if not _is_real(value) or not math.isfinite(value) or value <= 0:  # type: ignore[arg-type,operator]
        raise ValueError(f"{name} must be a positive finite number (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def seconds(name: str, value: object) -> float:
    """``value`` as a float if it is a finite, positive number of seconds (a period, a deadline)."""
    if not _is_real(value) or not math.isfinite(value) or value <= 0:  # type: ignore[arg-type,operator]
        raise ValueError(f"{name} must be a positive finite number of seconds (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def non_negative_seconds(name: str, value: object) -> float:
    """``value`` as a float if it is a finite number of seconds, 0 included (0: no waiting)."""
    if not _is_real(value) or not math.isfinite(value) or value < 0:  # type: ignore[arg-type,operator]
        raise ValueError(f"{name} must be a finite number of seconds >= 0 (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def seconds_or_off(name: str, value: object, default: float) -> float | None:
    """An interval that can be turned off: ``False`` → ``None`` (off), ``True`` → ``default``, a
    finite positive number of seconds → itself as a float (``EventBus(system_metrics=...)``)."""
    if value is False:
        return None
    if value is True:
        return default
    if not _is_real(value) or not math.isfinite(value) or value <= 0:  # type: ignore[arg-type,operator]
        raise ValueError(f"{name} must be a positive finite number of seconds, or False to turn it off (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def one_of(name: str, value: object, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``allowed`` (a policy, a mode, a state); else
    ``ValueError`` listing them: ``on_error must be one of 'raise', 'disable', 'log' (got 'x')``."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))} (got {value!r})")
    return value


def optional_seconds(name: str, value: object) -> float | None:
    """``None``, or :func:`seconds`."""
    return None if value is None else seconds(name, value)


def finite_number(name: str, value: object, *, allow_none: bool = False, non_negative: bool = False) -> float | None:
    """``value`` as a float if it is a finite real number (``None`` allowed when ``allow_none``)."""
    if value is None and allow_none:
        return None
    if not _is_real(value) or not math.isfinite(value):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be a finite number (got {value!r})")
    if non_negative and value < 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a non-negative number (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def flag(name: str, value: object, *, allow_none: bool = False) -> bool | None:
    """``value`` if it is ``True`` or ``False`` (not 1, not ``"yes"``, not a numpy bool); ``None``
    too when ``allow_none`` (an "undecided" default). The one check of every flag argument."""
    if isinstance(value, bool) or (value is None and allow_none):
        return value
    expected = "True, False or None" if allow_none else "True or False"
    raise ValueError(f"{name} must be {expected} (got {value!r})")


#: Strings that answer yes or no: where a flag or a directory is taken, they are a flag given as text.
_YES_NO = frozenset({"true", "false", "yes", "no", "y", "n", "on", "off", "1", "0", "none"})


def flag_or_directory(name: str, value: object) -> bool | str | os.PathLike[str]:
    """``value`` if it is ``True``, ``False`` or a non-empty directory path (``restore=``).

    A string that answers yes or no (``"yes"``, ``"True"``, ``"off"``, ...) is a flag given as
    text, not a directory: it is refused (a directory of that name is ``"./yes"``).
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str | os.PathLike) and (path := os.fspath(value)):
        if isinstance(path, str) and path.strip().lower() in _YES_NO:
            raise ValueError(
                f"{name} must be True, False or a directory (got {value!r}, a yes/no answer written as text: "
                f"pass True or False; for a directory of that name pass {os.path.join('.', path)!r})"
            )
        return value
    raise ValueError(f"{name} must be True, False or a directory (got {value!r})")


#: What a key may not contain: C0 and C1 controls (every str.splitlines break but two is one) and
#: U+2028/U+2029, which splitlines also breaks on; lone surrogates, which no UTF-8 file can hold.
_NOT_IN_NAMES = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def key_items(name: str, value: object, expected: str = "a key or a list of keys") -> tuple[object, ...]:
    """The keys ``value`` names, unchecked: a ``str`` is one key (never its characters), else an iterable.

    Every ``keys=`` goes through it, publishers' and sinks' (``expected`` says what else a sink
    takes: ``None`` for all keys).
    """
    if isinstance(value, str):
        return (value,)
    try:
        return tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{name} must be {expected} (got {value!r})") from None


def key_name(what: str, key: str) -> str:
    """``key`` if it can be a metric's name in every sink: a CSV column, a TensorBoard tag, a row.

    Anything ``str.splitlines`` splits on and C0/C1 control characters are refused (a line
    break in a CSV header breaks the file's resume; a control character garbles a terminal); every
    other character — spaces, commas, quotes, brackets, ``=``, ``/``, any script, emoji — is fine.
    The message names the key as ``what`` calls it (``"fetch key"``, ``"monitor"``, ...).
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f"{what} must be a non-empty string (got {key!r})")
    found = _NOT_IN_NAMES.search(key)
    if found is None:
        return key
    char = found.group()
    if "\ud800" <= char <= "\udfff":
        kind = "a lone surrogate (not text: no UTF-8 file can hold it)"
    elif len(f"a{char}b".splitlines()) > 1:
        kind = "a line break"
    else:
        kind = "a control character"
    raise ValueError(
        f"{what} {key!r} contains {kind} ({char!r}, U+{ord(char):04X}); keys are names: any character but "
        "line breaks and control characters (U+0000-U+001F, U+007F-U+009F, U+2028, U+2029)"
    )


def non_empty_path(name: str, value: object) -> str:
    """``value`` as a path string if it is a non-empty ``str`` or ``os.PathLike``; else ``ValueError``."""
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ValueError(f"{name} must be a non-empty str or os.PathLike (got {value!r})")
    return os.fspath(value)


def check_stop_signals(value: Iterable[int | str]) -> tuple[int, ...]:
    """SIGTERM and the signals of ``value`` that can be caught, as numbers; else ``ValueError``."""
    found = [signal.SIGTERM]
    for item in [value] if isinstance(value, str | int) else list(value):
        try:
            signum = signal.Signals[item] if isinstance(item, str) else signal.Signals(item)
        except (KeyError, ValueError, TypeError):
            raise ValueError(f"stop_signals must be signal numbers or names (got {item!r})") from None
        if signum in (signal.SIGKILL, signal.SIGSTOP, signal.SIGINT):
            why = "Ctrl-C already stops gracefully" if signum == signal.SIGINT else "it cannot be caught"
            raise ValueError(f"stop_signals cannot take {signum.name}: {why}")
        if signum not in found:
            found.append(signum)
    return tuple(int(s) for s in found)
