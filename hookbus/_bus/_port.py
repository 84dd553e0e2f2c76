"""What publishers use of a bus, kept off the bus's public surface: its parts, and its stamp.

:class:`hookbus.publisher_api.PublisherCore` holds a bus's port; the core talks to the parts it needs directly
(the roster, the keys, the run's state, the stops, the dispatcher, the barrier, the run scope,
the offers: checkpoints, learning rate, profiling, the model view). The port owns one thing of
its own: how an event is stamped (the bus's clocks, the task, the bus's stop), and it validates
the task a bus runs as. Users of a bus never need it: they attach, subscribe, stop and close.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hookbus._contract._cluster import Task
from hookbus._contract._events import _EMPTY, Event

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from hookbus._bus._barrier import Barrier
    from hookbus._bus._dispatch import Dispatcher
    from hookbus._bus._keys import KeyRegistry
    from hookbus._bus._offers import Offers
    from hookbus._bus._roster import Roster
    from hookbus._bus._run import RunScope
    from hookbus._bus._sampler import SystemMetrics
    from hookbus._bus._state import RunState
    from hookbus._bus._stops import Stops

__all__ = ["BusPort"]


class BusPort:
    """The publisher-facing side of a bus: the bus's parts, and the stamp of its events.

    Args:
        roster, keys, state, stops, dispatcher, barrier, scope, offers: The bus's
            parts, kept as the attributes of the same names (read-only here: the port never
            replaces a part; a part's own methods change its state).
        clock, wall_clock: The bus's clocks (what :meth:`event` stamps).
        set_task: Runs the bus as a task (the roster, and the bus's ``task`` attribute).
        system: The machine's sampler (kept as ``system``).

    Attributes:
        roster: The bus's subscribers: a publisher's core re-plans when its ``version`` moved
            (bumped on every (un)subscription and new run), compared on every quiet step.
        keys: Every publisher's keys, checked against the subscribers' at begin.
        state: The run's progress; the publishers' core alone writes its step.
        stops: The run's stops (what the transports across workers read and request through).
        dispatcher: Ordered, isolated delivery, and the hold of deferred work.
        barrier: The checkpoint barrier (a session's end flushes through it).
        scope: The run scope (``with bus:``, a publisher's begin, the evaluations counted).
        offers: What the training publisher offers the sinks (the profiling seam among them).
        system: The machine's sampler (a test publishes a sample through
            ``PublisherCore.sample_system``).
    """

    __slots__ = (
        "_clock",
        "_set_task",
        "_wall_clock",
        "barrier",
        "dispatcher",
        "keys",
        "offers",
        "roster",
        "scope",
        "state",
        "stops",
        "system",
    )

    def __init__(
        self,
        *,
        roster: Roster,
        keys: KeyRegistry,
        state: RunState,
        stops: Stops,
        dispatcher: Dispatcher,
        barrier: Barrier,
        scope: RunScope,
        offers: Offers,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        set_task: Callable[[Task | None], None],
        system: SystemMetrics,
    ) -> None:
        self.roster = roster
        self.system = system
        self.keys = keys
        self.state = state
        self.stops = stops
        self.dispatcher = dispatcher
        self.barrier = barrier
        self.scope = scope
        self.offers = offers
        self._clock = clock
        self._wall_clock = wall_clock
        self._set_task = set_task

    def set_task(self, task: Task | None) -> None:
        """Run as ``task`` of a multi-worker cluster (before ``begin``): subscribers whose
        ``runs_on`` excludes it are neither planned nor called; ``runs_on="each"`` sinks get
        the task's output suffix."""
        if task is not None and not isinstance(task, Task):
            raise TypeError(f"task must be a hookbus.Task or None (got {task!r})")
        self._set_task(task)

    def event(
        self,
        signal: str,
        *,
        step: int,
        mode: str = "train",
        values: Mapping[str, Any] = _EMPTY,
        final: bool = False,
        **fields: Any,
    ) -> Event:
        """An :class:`Event` stamped with the bus's clocks (and the task, in multi-worker training)."""
        task = self.roster.task
        wall_time, elapsed = self._wall_clock(), self.state.elapsed(self._clock())
        if task is None and not fields:  # a due step's before_run: no keywords packed
            stop = self._stop_at
            return Event(
                signal, step, mode, values, wall_time, elapsed, False, False, final, None, None, None, None, None, stop
            )
        if task is not None:
            fields.update(task_type=task.type, task_index=task.index, local_step=self.state.local_step)
        return Event(signal, step, mode, values, wall_time, elapsed, final=final, _stop=self._stop_at, **fields)

    def step_event(
        self,
        step: int,
        mode: str,
        values: Mapping[str, Any],
        final: bool,
        examples: int | None,
        outside_secs: float | None,
    ) -> Event:
        """A training step's ``after_run`` :class:`Event`, as :meth:`event` stamps it: the due step's
        path, every argument and field by position (keywords cost a due step about 0.3 us)."""
        task = self.roster.task
        wall_time, elapsed = self._wall_clock(), self.state.elapsed(self._clock())
        if task is None:
            task_type = task_index = local_step = None
        else:
            task_type, task_index, local_step = task.type, task.index, self.state.local_step
        return Event(
            "after_run",
            step,
            mode,
            values,
            wall_time,
            elapsed,
            False,
            False,
            final,
            task_type,
            task_index,
            local_step,
            examples,
            outside_secs,
            self._stop_at,
        )

    def _stop_at(self, reason: str, step: int) -> None:
        self.stops.request(reason, step=step)
