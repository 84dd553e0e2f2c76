"""The "monitor" shared by early stopping and checkpoint-on-best: a key, a direction, a margin."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hookbus.sink_api import TEST_PREFIX, better_direction
from hookbus.validate import key_name

__all__ = ["MODES", "Monitor", "check_scalar", "resolve_direction"]

MODES = ("min", "max", "auto")


def _checked_mode(mode: object) -> str:
    """``mode`` if it is one of :data:`MODES`, else a ValueError naming it."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'min', 'max' or 'auto' (got {mode!r})")
    return str(mode)


def resolve_direction(monitor: str, mode: object, declared: str | None = None, *, owner: str | None = None) -> str:
    """``"min"`` or ``"max"`` for ``monitor``; ``"auto"`` (the default) by the one direction rule.

    ``auto`` follows :func:`hookbus.sink_api.better_direction` (the dashboard's rule too): the
    direction the metric itself declares (``declared``: a Keras compiled metric's, as Keras's
    ``mode="auto"`` reads it) wins; otherwise the name: min for keys containing ``loss``,
    ``error``, ``crossentropy``, ``mae``, ``mape``, ``mse`` or ``msle``, max for ``acc``,
    ``auc``, ``precision``, ``recall``, ``f1``, ``iou`` or ``map``. Anything else needs an
    explicit mode.

    Raises:
        ValueError: for a mode other than the three, or where ``auto`` cannot tell (naming
            ``owner``, the sink, when given).
    """
    if _checked_mode(mode) != "auto":
        return str(mode)
    direction = better_direction(monitor, declared)
    if direction is not None:
        return direction
    who = f"{owner}: " if owner else ""
    raise ValueError(
        f"{who}mode='auto' cannot tell whether {monitor!r} should go down or up (neither its name nor "
        "the training publisher tells); pass mode='min' or mode='max'"
    )


def check_scalar(owner: str, key: str, shape: tuple[int | None, ...] | None) -> None:
    """Fail before step 1 if a publisher declared ``key`` with a static shape that is not a scalar."""
    if shape is not None and shape != ():
        raise ValueError(
            f"{owner} monitors {key!r}, a tensor of shape {shape}; it needs a scalar (shape ()): "
            "reduce it first, e.g. with tf.reduce_mean"
        )


@dataclass(frozen=True)
class Monitor:
    """A monitored quantity: which key, which direction, how much counts as better.

    Args:
        key: The event value to watch (e.g. ``"eval/loss"``).
        mode: ``"min"``, ``"max"``, or ``"auto"`` until :meth:`settled` resolves it as a run
            begins (comparisons need ``"min"`` or ``"max"``).
        min_delta: An improvement must beat the reference by more than this (default 0.0);
            its sign is ignored, as in Keras.
    """

    key: str
    mode: str
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        key_name("monitor", self.key)
        if self.key.startswith(TEST_PREFIX):
            # Test evaluations (model.evaluate outside fit) never reach a sink that steers training.
            name = self.key[len(TEST_PREFIX) :]
            raise ValueError(
                f"monitor {self.key!r} is a test evaluation's (model.evaluate outside fit), which never steers "
                f"training; monitor fit's validation {'eval/' + name!r} or the training's {name!r}"
            )
        _checked_mode(self.mode)

    def settled(self, owner: str, declared: Callable[[str], str | None]) -> Monitor:
        """This monitor with ``mode="auto"`` resolved (:func:`resolve_direction`) by what
        ``declared(key)`` says of the metric (the model view's ``direction``), as a
        run begins: before step 1, so a key nothing can decide fails then, asking for ``mode=``."""
        if self.mode != "auto":
            return self
        return Monitor(self.key, resolve_direction(self.key, "auto", declared(self.key), owner=owner), self.min_delta)

    def value(self, values: Mapping[str, Any]) -> float | None:
        """The monitored scalar in ``values``, or ``None`` if absent.

        Raises:
            ValueError: if the key is there but is not a scalar number (an array, bytes): a
                monitor that never sees a value would silently never stop or rank anything.
        """
        value = values.get(self.key)
        if value is None:
            return None
        if isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_):
            return float(value)
        got = f"an array of shape {value.shape}" if isinstance(value, np.ndarray) else f"{value!r:.60}"
        raise ValueError(f"monitor {self.key!r} needs a scalar number (got {got})")

    def is_improvement(self, value: float, reference: float | None) -> bool:
        """Whether ``value`` improves on ``reference`` by more than ``min_delta`` (``None``: always).

        The same comparison as Keras's ``MonitorCallback._is_improvement``: NaN never improves.
        """
        if reference is None:
            return True
        assert self.mode != "auto", "Monitor.settled resolves mode='auto' before any comparison"
        delta = abs(self.min_delta)
        if self.mode == "min":
            return value + delta < reference
        return value - delta > reference

    def better(self, value: float, other: float) -> bool:
        """Whether ``value`` ranks strictly better than ``other`` (no margin), for top-k lists."""
        return value < other if self.mode == "min" else value > other
