"""StopAtStepSink: stop at a step (StopAtStepHook's semantics) or after a wall-clock budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from hookbus.sink_api import Priority, Schedule, Sink
from hookbus.validate import optional_seconds, positive_int

if TYPE_CHECKING:
    from hookbus.sink_api import Event, SinkContext

__all__ = ["StopAtStepSink"]


class StopAtStepSink(Sink):
    """Requests a stop once training reaches a step, or once a time budget is spent.

    Steps follow ``StopAtStepHook``: give exactly one of ``last_step`` (an absolute global step)
    or ``num_steps`` (counted from the step of the first session of each ``begin``, so a resume
    from a checkpoint at S trains S+1 .. S+num_steps; a re-creation after a recoverable error
    keeps the target). A session that starts at or past the target stops at once.

    It costs nothing per step: its schedule makes it due exactly at the target step (and, with
    ``max_seconds``, once the budget is spent), and it needs the step alone (``keys`` is empty), so
    the publisher fetches no value for it even then.

    Under ``MultiWorkerMirroredStrategy`` keep it on every worker (the default ``runs_on="all"``)
    with the same target: the workers agree on that step at begin and all stop exactly there.
    A ``max_seconds`` stop is agreed at the next check step like any other (see
    :class:`hookbus.LoopPublisher`).

    Args:
        last_step: Stop when the step reaches this (default ``None``).
        num_steps: Stop after this many steps from session start (default ``None``).
        max_seconds: Also stop once this many seconds have passed since ``begin`` (default
            ``None``: no budget); measured with ``clock``.
        clock: Monotonic clock for the budget (default: the bus's clock, so schedules and the
            budget agree; inject one in tests).
        name: Name in reports (default the class name).

    Raises:
        ValueError: unless exactly one of ``last_step``/``num_steps`` is a positive int, or if
            ``max_seconds`` is not a positive number.
    """

    priority = Priority.STOP_AT_STEP
    controls_training: ClassVar[bool] = True
    on_error = "raise"

    def __init__(
        self,
        last_step: int | None = None,
        num_steps: int | None = None,
        max_seconds: float | None = None,
        *,
        clock: Callable[[], float] | None = None,
        name: str | None = None,
    ) -> None:
        if (last_step is None) == (num_steps is None):
            raise ValueError(
                f"give exactly one of last_step or num_steps (got last_step={last_step!r}, num_steps={num_steps!r})"
            )
        self.last_step = None if last_step is None else positive_int("last_step", last_step)
        self.num_steps = None if num_steps is None else positive_int("num_steps", num_steps)
        self.max_seconds = optional_seconds("max_seconds", max_seconds)
        # Due only at the target step (n = target: step // n first grows there) and when the
        # budget may be spent; num_steps re-targets at the first session (see on_session_created).
        super().__init__(every_n_steps=self.last_step or self.num_steps, every_n_secs=self.max_seconds, name=name)
        self.keys = frozenset()  # the step alone: its due step fetches no value (a summary op stays unrun)
        self._clock = clock
        self._target: int | None = self.last_step
        self._started: float | None = None

    @property
    def total_steps(self) -> int | None:
        """The step at which the run stops (known for ``num_steps`` once a session exists)."""
        return self._target

    def _now(self, event: Event) -> float:
        if self._clock is not None:
            return self._clock()
        return self.context.clock()

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        self._target, self._started = self.last_step, None  # a new run: its own target and time budget

    def on_begin(self, event: Event) -> None:
        if event.mode != "train":
            return
        if self._started is None:
            self._started = self._now(event)
        if self.num_steps is not None:
            self._target = None

    def on_session_created(self, event: Event) -> None:
        if event.mode != "train":
            return
        if self._target is None and self.num_steps is not None:
            self._target = event.step + self.num_steps
            self.context.reschedule(Schedule(every_n_steps=self._target, every_n_secs=self.max_seconds))
        if self._target is not None and event.step >= self._target:
            event.request_stop(f"step {event.step} is already at or past last_step {self._target}")

    def on_after_run(self, event: Event) -> None:
        if event.mode != "train":
            return
        if self._target is not None and event.step >= self._target:
            event.request_stop(f"reached step {event.step} (last_step {self._target})")
        elif self.max_seconds is not None and self._started is not None:
            spent = self._now(event) - self._started
            if spent >= self.max_seconds:
                event.request_stop(f"time budget of {self.max_seconds:g} s spent at step {event.step}")

    def status(self) -> str | None:
        return None if self._target is None else f"stop at step {self._target}"
