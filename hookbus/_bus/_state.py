"""One run's progress: the step it reached, whether it began, and when."""

from __future__ import annotations

__all__ = ["RunState"]


class RunState:
    """What one run (one ``with bus:``, or an implicit one) has reached; :meth:`reset` per run.

    Each field has one writer: the publishers' port moves the steps, the run scope the rest.

    Attributes:
        step: The training step the run has reached (only publishers' core moves it).
        local_step: Multi-worker: this worker's own training runs in this run.
        started: Whether a publisher began (subscriptions are closed then).
        start_time: The bus's monotonic clock when the run began (``None`` before).
        wall_start: The wall clock when the run began: run records older than this are an
            earlier run's.
    """

    __slots__ = ("local_step", "start_time", "started", "step", "wall_start")

    def __init__(self, wall_start: float) -> None:
        self.reset(wall_start)

    def reset(self, wall_start: float, start_time: float | None = None) -> None:
        """A new run begins (at ``start_time`` on the monotonic clock, if known)."""
        self.step = 0
        self.local_step = 0
        self.started = False
        self.start_time = start_time
        self.wall_start = wall_start

    def elapsed(self, now: float) -> float:
        """Seconds from the run's start to ``now`` (0 before it started)."""
        start = self.start_time
        return 0.0 if start is None else now - start
