"""NanGuardSink: fail (or stop) on the first NaN or inf, before any checkpoint can save it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from hookbus.sink_api import Priority, Sink

from ._finite import find_nonfinite

if TYPE_CHECKING:
    from hookbus.sink_api import Event, SinkContext

__all__ = ["NanGuardSink", "NonFiniteError"]

ON_NAN = ("raise", "stop")


class NonFiniteError(FloatingPointError, RuntimeError):
    """A guarded value was NaN or infinite (a ``RuntimeError`` too, what Keras's
    ``TerminateOnNaN(raise_error=True)`` raises)."""


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
        error: With ``on_nan="raise"``, the exception class raised, made with the message (default
            :class:`NonFiniteError`; :func:`hookbus.from_hooks` passes ``NanTensorHook``'s
            ``tf.compat.v1.train.NanLossDuringTrainingError``).

    Attributes:
        nonfinite_step: The first step of the current session found non-finite, else ``None``;
            from it on the guard vetoes every checkpoint (:meth:`checkpoint_veto`).
    """

    priority = Priority.NAN_GUARD
    on_error = "raise"
    controls_training: ClassVar[bool] = True

    def __init__(
        self,
        keys: str | Iterable[str] = "loss",
        every_n_steps: int = 1,
        on_nan: str = "raise",
        *,
        name: str | None = None,
        error: type[BaseException] = NonFiniteError,
    ) -> None:
        if not (isinstance(error, type) and issubclass(error, BaseException)):
            raise ValueError(f"error must be an exception class (got {error!r})")
        if keys is None:
            raise ValueError("keys must be a key or a list of keys to check (got None)")
        if on_nan not in ON_NAN:
            raise ValueError(f"on_nan must be 'raise' or 'stop' (got {on_nan!r})")
        super().__init__(keys=keys, every_n_steps=every_n_steps, name=name)
        self.on_nan = on_nan
        self.error = error
        self.guarded: tuple[str, ...] = tuple(sorted(self.keys or ()))
        self.nonfinite_step: int | None = None

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        self.nonfinite_step = None  # a new run: its model's steps are judged afresh

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
            raise self.error(message + "; no checkpoint was saved from this step")
        event.request_stop(message)

    def checkpoint_veto(self, step: int) -> str | None:
        bad = self.nonfinite_step
        if bad is not None and step >= bad:
            return f"step {step} is at or after the non-finite step {bad}"
        return None
