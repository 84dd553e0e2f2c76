"""Finding NaN and inf in an event's values (shared by the NaN guard and the checkpoint sink)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from hookbus.sink_api import is_real_dtype

__all__ = ["find_nonfinite"]


def _inexact(dtype: np.dtype[Any]) -> bool:
    # ml_dtypes' floats (bfloat16, float8_*) are of kind "V": real dtypes, and np.isfinite knows them.
    return dtype.kind in "fc" or (dtype.kind == "V" and is_real_dtype(dtype))


def find_nonfinite(values: Mapping[str, Any], keys: Iterable[str]) -> tuple[str, Any] | None:
    """The first of ``keys`` whose value in ``values`` has a NaN or inf, as ``(key, value)``; pure."""
    for key in keys:
        value = values.get(key)
        if isinstance(value, float):
            if not math.isfinite(value):
                return key, value
        elif isinstance(value, np.ndarray) and _inexact(value.dtype) and not np.all(np.isfinite(value)):
            return key, value
    return None
