"""Sink health: what each subscriber costs the training thread, how its writer keeps up, whether it fails.

The dispatcher times every handler call it makes (``time.perf_counter`` around the call) into
the subscriber's :class:`Usage`. Handlers are called only on due dispatches and lifecycle
signals, so a quiet step — where the publisher plans, finds nothing due and sends nothing —
costs nothing here. :meth:`hookbus.EventBus.stats` freezes the counters into
:class:`BusStats`, together with each sink's :class:`WriterStats` (``Sink.writer_stats``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["BusStats", "SubscriberStats", "Usage", "WriterStats"]

logger = logging.getLogger("hookbus")


class Usage:
    """The mutable counters of one subscriber in one run, kept by the dispatcher."""

    __slots__ = ("max_seconds", "other_calls", "other_seconds", "step_calls", "step_seconds")

    def __init__(self) -> None:
        # The dispatcher updates these inline, two counters a call (a method call, or a third
        # counter for the total, would cost as much again on every due step).
        self.step_calls = 0  # after_run calls (a due step or an evaluation)
        self.step_seconds = 0.0
        self.other_calls = 0  # every other signal
        self.other_seconds = 0.0  # and the work deferred after a dispatch (a checkpoint's save)
        self.max_seconds = 0.0

    def add_deferred(self, seconds: float) -> None:
        """Work the subscriber deferred until after the dispatch (a checkpoint's save) took ``seconds``."""
        self.other_seconds += seconds
        if seconds > self.max_seconds:
            self.max_seconds = seconds


@dataclass(frozen=True)
class WriterStats:
    """How a sink's background writer keeps up (what the writer can tell).

    Attributes:
        rows: Rows (CSV lines, TensorBoard events) the sink handed to its writer in this run.
        written: Of those, the rows the writer has written, or ``None`` when the writer does not
            say (TensorBoard's own ``EventFileWriter``).
        queued: Rows waiting in the writer's queue, or ``None`` when the writer does not say.
        capacity: The queue's size: a full queue blocks training until the disk catches up.
        stalled: ``None``, or once a flush missed its deadline (a stalled disk), the report: the
            sink, its path and what it could not write. The sink is then disabled.
        unreachable: ``None``, or while a writer's remote destination (a tracker's server) does
            not take what it is sent, the report: the sink, the server's URI (credentials
            redacted), the error and what waits locally. The sink stays enabled.
        held: How many of the rows found the queue full, so that the training thread waited for
            the writer, or ``None`` when the writer does not say (TensorBoard's own thread).
        held_seconds: How long the training thread waited for those rows, in all.
        lost: Rows that will never be written: left in the queue at the close deadline, or not
            written because the writer failed (its error is counted in the subscriber's
            ``errors``). 0 while the writer is healthy. For a function subscriber on a thread of
            its own (``bus.on(..., background=True)``) a row is one event, ``written`` counts the
            events handed to the function and ``lost`` those it never received.
    """

    rows: int
    written: int | None
    queued: int | None
    capacity: int | None
    stalled: str | None = None
    unreachable: str | None = None
    held: int | None = None
    held_seconds: float = 0.0
    lost: int = 0

    @property
    def backlog(self) -> float | None:
        """``queued / capacity`` (0 to 1), or ``None`` when either is unknown."""
        if self.queued is None or not self.capacity:
            return None
        return self.queued / self.capacity


@dataclass(frozen=True)
class SubscriberStats:
    """One subscriber's health in the current (or last) run.

    Attributes:
        name: The sink's or function's name.
        kind: ``"sink"`` or ``"function"``.
        on_error: Its error policy.
        calls: Handler calls on the publishing (training) thread, every signal.
        seconds: Time spent in those calls (``time.perf_counter``).
        max_seconds: The longest single call.
        step_calls: Calls for ``after_run`` (a due step or an evaluation).
        step_seconds: Time spent in those.
        errors: Exceptions raised by its handlers, on the training thread or on its own thread
            (``bus.on(..., background=True)``), and by its ``close`` (a background write that
            failed as the run closed).
        disabled: Whether the bus stopped calling it (``on_error="disable"``, or a writer that
            failed at a checkpoint barrier).
        writer: Its writer's counters (sinks with a background writer, and a function subscriber
            on a thread of its own: its queue, the events delivered and those lost), else ``None``.
    """

    name: str
    kind: str
    on_error: str
    calls: int
    seconds: float
    max_seconds: float
    step_calls: int
    step_seconds: float
    errors: int
    disabled: bool
    writer: WriterStats | None

    @property
    def failed(self) -> bool:
        """Whether anything of its work failed or was cut: an error, disabled, or a writer that
        stalled or lost rows (at the close deadline). Such a subscriber is never counted "ok"."""
        writer = self.writer
        return bool(
            self.errors or self.disabled or (writer is not None and (writer.lost or writer.stalled is not None))
        )

    @property
    def mean_seconds(self) -> float:
        """Mean time per ``after_run`` call (0.0 before the first)."""
        return self.step_seconds / self.step_calls if self.step_calls else 0.0


@dataclass(frozen=True)
class BusStats:
    """Every subscriber's health, in dispatch order: what :meth:`hookbus.EventBus.stats` returns.

    Attributes:
        step: The training step the run has reached.
        due_steps: ``after_run`` events published in this run (due steps and evaluations).
        subscribers: One :class:`SubscriberStats` per subscriber running on this task.

    Iterating it yields those :class:`SubscriberStats`; ``stats[name]`` finds one by name and
    ``name in stats`` says whether there is one.
    """

    step: int
    due_steps: int
    subscribers: tuple[SubscriberStats, ...]

    @property
    def seconds_per_due_step(self) -> float:
        """The subscribers' time on the training thread (every call and deferred save, all of
        them together) per due step: what the bus adds to a step where anything is due."""
        total = sum(s.seconds for s in self.subscribers)
        return total / self.due_steps if self.due_steps else 0.0

    def __iter__(self) -> Iterator[SubscriberStats]:
        """Every subscriber's stats, in dispatch order (``for s in bus.stats(): print(s.name)``)."""
        return iter(self.subscribers)

    def __len__(self) -> int:
        """How many subscribers run on this task."""
        return len(self.subscribers)

    def __contains__(self, name: object) -> bool:
        """Whether a subscriber is named ``name`` (``"CSVSink" in bus.stats()``)."""
        return any(stats.name == name for stats in self.subscribers)

    def __getitem__(self, name: str) -> SubscriberStats:
        """The stats of the subscriber named ``name`` (the first, if several share it).

        Raises:
            TypeError: ``name`` is not a string (iterate the stats for every subscriber).
            KeyError: No subscriber is named ``name``; the message lists the names.
        """
        if not isinstance(name, str):
            raise TypeError(
                f"bus.stats() is looked up by a subscriber's name (got {name!r}); iterate it for every "
                "subscriber's stats, in dispatch order"
            )
        for stats in self.subscribers:
            if stats.name == name:
                return stats
        known = ", ".join(repr(s.name) for s in self.subscribers)
        raise KeyError(f"no subscriber named {name!r}; the subscribers are {known}")
