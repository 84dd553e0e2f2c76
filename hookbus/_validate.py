"""The argument checks every constructor shares, with one message shape for all of them."""

from __future__ import annotations

import os

__all__ = ["non_empty_path", "positive_int", "positive_number"]


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int above 0 (not a bool); else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int (got {value!r})")
    return value


def positive_number(name: str, value: object) -> float:
    """``value`` if it is an int or float above 0 (not a bool, not NaN); else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a positive number (got {value!r})")
    return value


def non_empty_path(name: str, value: object) -> str:
    """``value`` as a path string if it is a non-empty ``str`` or ``os.PathLike``; else ``ValueError``."""
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ValueError(f"{name} must be a non-empty str or os.PathLike (got {value!r})")
    return os.fspath(value)
