"""Who is subscribed to a bus: the records in dispatch order, the ones that run on this task.

The roster owns the subscriber records and the version publishers re-plan on: every change to
who runs, or when (a subscription, a removal, a new schedule, a task, a new run), bumps it. It
knows nothing of delivery, stops or the run's scope; the bus's parts read it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from hookbus._contract._stats import BusStats, SubscriberStats, WriterStats

if TYPE_CHECKING:
    from hookbus._bus._subscription import Subscriber
    from hookbus._contract._cluster import Task
    from hookbus._contract._schedule import Schedule
    from hookbus._contract._sink import Sink

__all__ = ["Roster"]

logger = logging.getLogger("hookbus")


class Roster:
    """The subscribers of one bus, in dispatch order (priority, then registration).

    Attributes:
        records: Every subscriber, in dispatch order (read it; change it through the methods).
        here: Those that run on this task (``records`` itself on one machine).
        task: This process's task in multi-worker training, ``None`` on one machine.
        version: Bumped on every change to who runs or when: plans made before are stale.
    """

    def __init__(self) -> None:
        self.records: list[Subscriber] = []
        self.here: list[Subscriber] = self.records
        self.task: Task | None = None
        self.version = 0
        self._order = 0

    def next_order(self) -> int:
        """The registration number of the next subscriber (ties in priority run in this order)."""
        self._order += 1
        return self._order

    def add(self, record: Subscriber) -> None:
        """Subscribe ``record`` in its place in the dispatch order."""
        self.records.append(record)
        self.records.sort(key=lambda s: s.sort_key)
        self._select_local()

    def remove(self, record: Subscriber) -> None:
        """Unsubscribe ``record``; harmless if it is not subscribed."""
        if record in self.records:
            self.records.remove(record)
            self._select_local()

    def __contains__(self, record: object) -> bool:
        return record in self.records

    def record_of(self, sink: Sink) -> Subscriber | None:
        """The record of an attached ``sink``, or ``None``."""
        for record in self.records:
            if record.sink is sink:
                return record
        return None

    def attached(self, sink: Sink) -> Subscriber:
        """The record of ``sink``, which must be attached.

        Raises:
            ValueError: if ``sink`` is not attached.
        """
        record = self.record_of(sink)
        if record is None:
            raise ValueError(f"{sink!r} is not attached to this bus")
        return record

    @property
    def sinks(self) -> list[Sink]:
        """The attached sinks, in dispatch order."""
        return [r.sink for r in self.records if r.sink is not None]

    def reschedule(self, sink: Sink, schedule: Schedule, step: int, now: float) -> None:
        """Give an attached ``sink`` a new schedule, counted from ``step`` at ``now``.

        Raises:
            ValueError: if ``sink`` is not attached.
        """
        record = self.attached(sink)
        record.timer = schedule.timer()
        record.timer.reset(step, now)
        self.version += 1

    def set_task(self, task: Task | None) -> None:
        """Run as ``task``: the records whose ``runs_on`` excludes it leave :attr:`here`;
        ``runs_on="each"`` sinks get the task's output suffix."""
        self.task = task
        if task is not None:
            for record in self.records:
                if record.sink is not None:
                    record.runs_on = record.sink.runs_on  # it may have been set after attach
                    if record.runs_on == "each":
                        record.sink.set_output_suffix(task.suffix)
        self._select_local()

    def new_run(self) -> None:
        """A run begins: every schedule, error count and usage starts afresh."""
        for record in self.records:
            record.start_run()
        self.version += 1  # publishers re-plan against the fresh timers

    def _select_local(self) -> None:
        """``here``: the records that run on this task (every record without a task)."""
        task = self.task
        self.here = (
            self.records
            if task is None
            else [
                r
                for r in self.records
                if task.runs(r.runs_on, joins_collectives=getattr(r.sink, "joins_collectives", False))
            ]
        )
        self.version += 1

    def stats(self, step: int, due_steps: int) -> BusStats:
        """Freeze the counters of the records here (and their sinks' writer counters)."""
        frozen = []
        for record in tuple(self.here):
            usage, sink = record.usage, record.sink
            writer: WriterStats | None = None
            if sink is not None:
                try:
                    writer = sink.writer_stats()
                except Exception:  # one sink's report must not break the others' (or a dashboard)
                    logger.debug("writer_stats of %r failed", sink, exc_info=True)
            elif record.worker is not None:  # a function on its own thread: its queue and losses
                writer = record.worker.stats()
            frozen.append(
                SubscriberStats(
                    name=record.name,
                    kind="function" if sink is None else "sink",
                    on_error=record.on_error,
                    calls=usage.step_calls + usage.other_calls,
                    seconds=usage.step_seconds + usage.other_seconds,
                    max_seconds=usage.max_seconds,
                    step_calls=usage.step_calls,
                    step_seconds=usage.step_seconds,
                    errors=record.errors,
                    disabled=record.disabled,
                    writer=writer,
                )
            )
        return BusStats(step, due_steps, tuple(frozen))
