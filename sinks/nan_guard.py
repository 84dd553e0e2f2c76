"""NanGuardSink: fail (or stop) on the first NaN or inf, before any checkpoint can save it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from hookbus._subscriber import PRIORITY_NAN_GUARD, Sink

if TYPE_CHECKING:
    from hookbus._events import Event

__all__ = ["NonFiniteError", "NanGuardSink", "find_nonfinite"]

ON_NAN = ("raise", "stop")


class NonFiniteError(FloatingPointError):
    """A guarded value was NaN or infinite."""


def find_nonfinite(values: Mapping[str, Any], keys: Iterable[str]) -> tuple[str, Any] | None:
    """The first of ``keys`` whose value in ``values`` has a NaN or inf, as ``(key, value)``; pure."""
    for key in keys:
        value = values.get(key)
        if isinstance(value, float):
            if not math.isfinite(value):
                return key, value
        elif isinstance(value, np.ndarray) and value.dtype.kind in "fc" and not np.all(np.isfinite(value)):
            return key, value
    return None


class NanGuardSink(Sink):
    """Ends the run on the first non-finite value of ``keys`` (TF's ``NanTensorHook``).

    It runs before every other subscriber (priority) so that the checkpoint sink, which runs
    next, never saves that step; the bad step still reaches the other sinks (the CSV shows its
    ``nan`` row) before the error surfaces.

    Args:
        keys: The key or keys to check (default ``"loss"``).
        every_n_steps: Check every n steps (default 1: each step, a fetch of ``keys`` per step).
        on_nan: ``"raise"`` (default): raise :class:`NonFiniteError` naming key, value and step;
            ``"stop"``: request a stop instead (no checkpoint is saved from that step on).
        name: Name in reports (default the class name).

    Attributes:
        nonfinite_step: The first step of the current session found non-finite, else ``None``;
            checkpoint sinks refuse to save from it on.
    """

    priority = PRIORITY_NAN_GUARD
    on_error = "raise"

    def __init__(
        self,
        keys: str | Iterable[str] = "loss",
        every_n_steps: int = 1,
        on_nan: str = "raise",
        *,
        name: str | None = None,
    ) -> None:
        if keys is None:
            raise ValueError("keys must be a key or a list of keys to check (got None)")
        if on_nan not in ON_NAN:
            raise ValueError(f"on_nan must be 'raise' or 'stop' (got {on_nan!r})")
        super().__init__(keys=keys, every_n_steps=every_n_steps, name=name)
        self.on_nan = on_nan
        self.guarded: tuple[str, ...] = tuple(sorted(self.keys or ()))
        self.nonfinite_step: int | None = None

    def on_session_created(self, event: Event) -> None:
        if event.mode == "train" and self.nonfinite_step is not None and event.step < self.nonfinite_step:
            self.nonfinite_step = None  # the session rewound to before the bad step

    def on_after_run(self, event: Event) -> None:
        found = find_nonfinite(event.values, self.guarded)
        if found is None:
            return
        key, value = found
        if self.nonfinite_step is None or event.step < self.nonfinite_step:
            self.nonfinite_step = event.step
        message = f"{key} is non-finite ({value!r}) at step {event.step}"
        if self.on_nan == "raise":
            raise NonFiniteError(message + "; no checkpoint was saved from this step")
        event.request_stop(message)
