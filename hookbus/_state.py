"""One run's mutable state, shared by the bus's parts (delivery, run scope, barrier)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hookbus._evaluated import EvaluatedSteps

if TYPE_CHECKING:
    from hookbus._events import StopRequest
    from hookbus._records import EvaluatorLink
    from hookbus._subscription import Subscriber

__all__ = ["RunState"]


class RunState:
    """What one run (one ``with bus:``, or an implicit one) has reached; :meth:`reset` per run.

    Attributes:
        step: The training step the run has reached (only publishers' core moves it).
        local_step: Multi-worker: this worker's own training runs in this run.
        should_stop, stop_reason: Whether a stop was requested, and the first reason.
        started: Whether a publisher began (subscriptions are closed then).
    """

    __slots__ = (
        "closed",
        "current",
        "deferred",
        "depth",
        "due_steps",
        "evaluated",
        "evaluator",
        "foreign_stops",
        "implicit",
        "in_run",
        "interrupted",
        "local_step",
        "owner",
        "pending_stops",
        "previous_handlers",
        "should_stop",
        "signal_stop",
        "start_time",
        "started",
        "step",
        "stop_reason",
        "wall_start",
    )

    def __init__(self, wall_start: float) -> None:
        self.in_run = False  # inside `with bus:`
        self.implicit = False  # a run a publisher opened without `with bus:`
        self.reset(wall_start)

    def reset(self, wall_start: float) -> None:
        """A new run begins (``in_run`` is the run scope's to set)."""
        self.stop_reason: str | None = None
        self.should_stop = False
        self.step = 0
        self.local_step = 0
        self.started = False
        self.start_time: float | None = None
        self.wall_start = wall_start  # run records older than this are an earlier run's
        self.closed: set[int] = set()
        self.depth = 0  # nesting of dispatches in progress
        self.due_steps = 0  # after_run events published (what bus.stats() divides by)
        self.evaluated = EvaluatedSteps()  # one evaluation per step (hookbus._evaluated)
        self.pending_stops: list[StopRequest] = []
        self.deferred: list[Callable[[], None]] = []
        self.current: Subscriber | None = None  # the subscriber being called
        self.signal_stop: str | None = None
        self.owner: int | None = None  # the training thread, once a publisher began
        self.foreign_stops: list[tuple[str, str]] = []
        self.evaluator: EvaluatorLink | None = None
        self.previous_handlers: dict[int, Any] = {}  # the handlers ``with bus:`` replaced, by signal
        self.interrupted = False  # a first Ctrl-C asked for a graceful stop
