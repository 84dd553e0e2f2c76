"""The event bus: signals, subscribers and publishers, keys, SIGTERM and the run scope."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import blinker

from hookbus._barrier import Barrier, PreparedCheckpoint
from hookbus._cluster import Task, check_runs_on
from hookbus._context import PeerReport, SinkContext
from hookbus._dispatch import Dispatcher
from hookbus._events import Event, StopRequest
from hookbus._records import EvaluatorLink, RunRecords
from hookbus._run import RunScope
from hookbus._schedule import Schedule
from hookbus._subscriber import (
    PRIORITY_DEFAULT,
    SIGNALS,
    STEP_SIGNALS,
    Sink,
    Subscriber,
    Subscription,
    check_keys,
    check_on_error,
    check_priority,
)

if TYPE_CHECKING:

    from hookbus._checkpoint import CheckpointBackend

__all__ = ["EventBus", "UnknownKeyError", "Publisher"]

logger = logging.getLogger("hookbus")
_SinkT = TypeVar("_SinkT", bound=Sink)

_SIGNAL_DOCS = {
    "begin": "A publisher began (graph built, before any session). Payload: event=Event.",
    "after_create_session": "A session was created. Payload: event=Event(step).",
    "session_created": "A (re)created session is a resume point. Payload: event=Event(step, restored).",
    "before_run": "A due training step is about to run. Payload: event=Event(step=expected step).",
    "after_run": "A due step ran, or an evaluation finished. Payload: event=Event(step, mode, values).",
    "end": "A publisher ended cleanly. Payload: event=Event(step).",
    "stop_requested": "A subscriber or a signal asked to stop. Payload: event=StopRequest.",
    "subscriber_error": "A subscriber raised. Payload: event=SubscriberError.",
    "exception": "Training raised; subscribers are closed next. Payload: event=ExceptionRaised.",
    "checkpoint_saved": "A checkpoint became visible. Payload: event=CheckpointSaved.",
}


class UnknownKeyError(ValueError):
    """A subscriber asked for a key that no publisher attached to the bus provides."""


class Publisher(Protocol):
    """What the bus needs to know of a publisher."""

    @property
    def bus_keys(self) -> frozenset[str]: ...

    @property
    def mode(self) -> str: ...


class EventBus(RunScope, Dispatcher):
    """Publishes the training lifecycle to subscribers in a deterministic, isolated order.

    Signals live in the bus's own :class:`blinker.Namespace` and are attributes of the bus
    (``bus.after_run``, ...). Raw blinker receivers (``bus.after_run.connect(fn)``) get every
    published event, unplanned and not isolated; :meth:`on` and :meth:`attach` are the
    scheduled, ordered, isolated path.

    ``with bus:`` is one run: SIGTERM becomes a stop request, an exception from the block is
    published as ``exception`` before every subscriber is closed (exactly once), and the
    exception surfaces unchanged.

    Args:
        clock: Monotonic clock for schedules (default :func:`time.monotonic`).
        wall_clock: Clock for ``Event.wall_time`` (default :func:`time.time`).

    Attributes:
        checkpoint_backend: How the training publisher's model is saved and restored (a
            :class:`hookbus._checkpoint.CheckpointBackend`); set by a train-mode publisher in
            its ``begin``, ``None`` before. Checkpoint sinks use it.
    """

    begin: blinker.NamedSignal
    after_create_session: blinker.NamedSignal
    session_created: blinker.NamedSignal
    before_run: blinker.NamedSignal
    after_run: blinker.NamedSignal
    end: blinker.NamedSignal
    stop_requested: blinker.NamedSignal
    subscriber_error: blinker.NamedSignal
    exception: blinker.NamedSignal
    checkpoint_saved: blinker.NamedSignal

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self.namespace = blinker.Namespace()
        self.signals = {name: self.namespace.signal(name, doc=_SIGNAL_DOCS[name]) for name in SIGNALS}
        for name, signal in self.signals.items():
            setattr(self, name, signal)  # bus.after_run etc., declared below for type checkers
        self._subscribers: list[Subscriber] = []
        self._here: list[Subscriber] = self._subscribers  # those that run on this task
        #: This process's :class:`hookbus.Task` in multi-worker training (set by the publisher
        #: at begin), ``None`` on one machine.
        self.task: Task | None = None
        self._publishers: list[Publisher] = []
        self._order = 0
        self.version = 0  # bumped on every (un)subscription; publishers re-plan on change
        self.checkpoint_backend: CheckpointBackend | None = None
        self._barrier = Barrier(self)
        self._reset_run()

    # -- run state ---------------------------------------------------------------------------
    def _reset_run(self) -> None:
        self.stop_reason: str | None = None
        self.should_stop = False
        self.step = 0
        self.local_step = 0
        self.started = False
        self._start_time: float | None = None
        self._closed: set[int] = set()
        self._depth = 0
        self._pending_stops: list[StopRequest] = []
        self._deferred: list[Callable[[], None]] = []
        self._signal_stop: str | None = None
        self._current: Subscriber | None = None
        self._owner: int | None = None  # the training thread, once a publisher began
        self._foreign_stops: list[tuple[str, str]] = []
        self._evaluator: EvaluatorLink | None = None
        self._run_wall_start = self.wall_clock()  # records older than this are an earlier run's
        self._previous_handler: Any = None
        self._handler_installed = False
        self._in_run = False

    @property
    def elapsed(self) -> float:
        """Seconds since the run began (0 before)."""
        return 0.0 if self._start_time is None else self.clock() - self._start_time

    def event(self, signal: str, *, step: int, mode: str = "train", **fields: Any) -> Event:
        """Build an :class:`Event` stamped with this bus's clocks."""
        task = self.task
        if task is not None:
            fields.update(task_type=task.type, task_index=task.index, local_step=self.local_step)
        return Event(
            signal,
            step,
            mode,
            wall_time=self.wall_clock(),
            elapsed=self.elapsed,
            _stop=self._stop_at,
            **fields,
        )

    def _stop_at(self, reason: str, step: int) -> None:
        self.request_stop(reason, step=step)

    # -- subscribing -------------------------------------------------------------------------
    @property
    def subscribers(self) -> list[Subscriber]:
        """Every subscriber, in dispatch order (priority, then registration)."""
        return list(self._subscribers)

    @property
    def sinks(self) -> list[Sink]:
        """The attached sinks, in dispatch order."""
        return [s.sink for s in self._subscribers if s.sink is not None]

    def _add(self, record: Subscriber) -> None:
        if self.started:
            raise RuntimeError(
                f"cannot subscribe {record.name!r} after the run began; attach every sink and "
                "function before the first session starts"
            )
        self._subscribers.append(record)
        self._subscribers.sort(key=lambda s: s.sort_key)
        self._locate()

    def _locate(self) -> None:
        task = self.task
        self._here = (
            self._subscribers
            if task is None
            else [
                r
                for r in self._subscribers
                if task.runs(r.runs_on, joins_collectives=getattr(r.sink, "joins_collectives", False))
            ]
        )
        self.version += 1

    @property
    def local_subscribers(self) -> list[Subscriber]:
        """The subscribers that run on this task (all of them on one machine), in dispatch order."""
        return list(self._here)

    def set_task(self, task: Task | None) -> None:
        """Run as ``task`` of a multi-worker cluster (publishers call it before ``begin``).

        Subscribers whose ``runs_on`` excludes the task are neither planned, fetched for nor
        called; sinks with ``runs_on="each"`` get the task's output suffix.
        """
        if task is not None and not isinstance(task, Task):
            raise TypeError(f"task must be a hookbus.Task or None (got {task!r})")
        self.task = task
        if task is not None:
            for record in self._subscribers:
                if record.sink is not None:
                    record.runs_on = record.sink.runs_on  # it may have been set after attach
                    if record.runs_on == "each":
                        record.sink.set_output_suffix(task.suffix)
        self._locate()

    def attach(self, sink: _SinkT) -> _SinkT:
        """Subscribe every ``on_<signal>`` method ``sink`` overrides; returns the sink.

        Raises:
            TypeError: if ``sink`` is not a :class:`Sink`.
            ValueError: if it is already attached.
            RuntimeError: once the run has begun.
        """
        if not isinstance(sink, Sink):
            raise TypeError(f"attach() takes a hookbus.Sink (got {sink!r}); use bus.on() for a function")
        if any(s.sink is sink for s in self._subscribers):
            raise ValueError(f"{sink!r} is already attached to this bus")
        if not sink.controls_training and type(sink).checkpoint_veto is not Sink.checkpoint_veto:
            raise TypeError(
                f"{type(sink).__name__} overrides checkpoint_veto() but does not control training; only "
                "control sinks may veto a checkpoint: set controls_training = True on the class"
            )
        self._order += 1
        self._add(
            Subscriber(
                name=sink.name,
                handlers=sink.handlers(),
                schedule=sink.schedule,
                keys=sink.keys,
                priority=sink.priority,
                on_error=sink.on_error,
                order=self._order,
                sink=sink,
                runs_on=sink.runs_on,
            )
        )
        return sink

    def reschedule(self, sink: Sink, schedule: Schedule) -> None:
        """Give an attached ``sink`` a new schedule, counted from the current step.

        For sinks whose due step is known only once a session exists (``StopAtStepSink``'s
        ``num_steps``); publishers re-plan on their next step.
        """
        for record in self._subscribers:
            if record.sink is sink:
                record.timer = schedule.timer()
                record.timer.reset(self.step)
                self.version += 1
                return
        raise ValueError(f"{sink!r} is not attached to this bus")

    def detach(self, sink: Sink) -> None:
        """Unsubscribe ``sink`` (it is not closed). Raises ValueError if it is not attached."""
        for record in self._subscribers:
            if record.sink is sink:
                self.remove(record)
                return
        raise ValueError(f"{sink!r} is not attached to this bus")

    def on(
        self,
        signal: str,
        fn: Callable[[Any], Any] | None = None,
        *,
        every_n_steps: int | None = None,
        every_n_secs: float | None = None,
        at_begin: bool = False,
        at_end: bool = False,
        keys: str | Iterable[str] | None = None,
        priority: int = PRIORITY_DEFAULT,
        on_error: str = "raise",
        name: str | None = None,
        runs_on: str = "all",
    ) -> Any:
        """Subscribe a function to ``signal``; usable as a decorator.

        The function is held strongly (a lambda or closure cannot vanish) and receives the
        signal's payload. For ``before_run`` and ``after_run`` the schedule arguments apply
        (default: every step); other signals take no schedule.

        Args:
            signal: One of the bus's signal names.
            fn: The function; omit it to use ``on`` as a decorator.
            every_n_steps, every_n_secs, at_begin, at_end: The schedule (:class:`Schedule`).
            keys: Keys the function needs (default ``None``: every key).
            priority: Lower runs first (default 100, after control sinks and checkpoints).
            on_error: ``"raise"`` (default), ``"isolate"`` or ``"disable"``.
            name: Shown in reports (default: the function's qualified name).
            runs_on: ``"all"`` (default) or ``"chief"``: where it runs in multi-worker training.

        Returns:
            A :class:`Subscription` (callable like the function; ``disconnect()``; a context
            manager), or, without ``fn``, a decorator returning one.
        """
        if signal not in self.signals:
            raise ValueError(f"unknown signal {signal!r}; expected one of {', '.join(SIGNALS)}")
        schedule = Schedule(every_n_steps, every_n_secs, at_begin, at_end)
        if signal in STEP_SIGNALS:
            if schedule == Schedule():
                schedule = Schedule(every_n_steps=1)
        elif schedule != Schedule():
            raise ValueError(f"schedule arguments apply to 'before_run' and 'after_run' only (got them for {signal!r})")
        checked_keys = check_keys(keys)
        checked_priority = check_priority(priority)
        checked_policy = check_on_error(on_error)
        if check_runs_on(runs_on) == "each":
            raise ValueError("runs_on='each' is for sinks with an output path; a function takes 'all' or 'chief'")

        def subscribe(func: Callable[[Any], Any]) -> Subscription:
            if not callable(func):
                raise TypeError(f"bus.on() needs a callable (got {func!r})")
            self._order += 1
            record = Subscriber(
                name=name or str(getattr(func, "__qualname__", repr(func))),
                handlers={signal: func},
                schedule=schedule,
                keys=checked_keys,
                priority=checked_priority,
                on_error=checked_policy,
                order=self._order,
                runs_on=runs_on,
            )
            self._add(record)
            return Subscription(self, signal, func, record)

        return subscribe if fn is None else subscribe(fn)

    def remove(self, record: Subscriber) -> None:
        """Remove a subscriber record (what :meth:`Subscription.disconnect` calls)."""
        if record in self._subscribers:
            self._subscribers.remove(record)
            self._locate()

    def is_subscribed(self, record: Subscriber) -> bool:
        return record in self._subscribers

    # -- an evaluator task beside training -------------------------------------------------------
    def link_evaluator(self) -> None:
        """Listen for an evaluator's stop and mark the run's end in the checkpoint directory.

        A train publisher calls it as it begins. It applies where this process saves checkpoints
        (one machine, or the chief) and exactly one attached sink saves them.
        """
        if self._evaluator is not None or (self.task is not None and not self.task.is_chief):
            return
        directories = {d for s in self.sinks if (d := s.checkpoint_directory) is not None}
        if len(directories) == 1:
            self._evaluator = EvaluatorLink(RunRecords(directories.pop()), since=self._run_wall_start)

    def _poll_evaluator(self) -> None:
        link = self._evaluator
        if link is not None:
            found = link.poll(self.clock())
            if found is not None:
                reason, step = found
                self.request_stop(f"evaluator: {reason} (evaluated step {step})", source="evaluator")

    def _mark_ended(self) -> None:
        link, self._evaluator = self._evaluator, None
        if link is not None:
            try:
                link.records.mark_ended(self.step, self.wall_clock())
            except OSError:  # a full or read-only disk must not mask how the run ended
                logger.exception("could not record the end of the run for an evaluator")

    # -- what sinks may use ----------------------------------------------------------------------
    def _context_for(self, sink: Sink) -> SinkContext:
        return SinkContext(
            clock=self.clock,
            task=self.task,
            known_keys=self.known_keys,
            static_shape=self.static_shape,
            current_step=lambda: self.step,
            defer=self.call_after_dispatch,
            reschedule=lambda schedule: self.reschedule(sink, schedule),
            peers=lambda: self._peer_reports(sink),
            checkpoint_backend=lambda: self.checkpoint_backend,
            prepare_checkpoint=self.prepare_checkpoint,
            commit_checkpoint=self._barrier.commit,
            record_checkpoints=self._barrier.record,
            load_states=self._load_states,
            check_state_names=self._check_state_names,
            publish_checkpoint=lambda saved: self.publish("checkpoint_saved", saved),
            best_restorer=self._best_restorer,
        )

    def _best_restorer(self, monitor: str) -> Callable[[], str | None] | None:
        for sink in self.sinks:
            restore = sink.best_restorer(monitor)
            if restore is not None:
                return restore
        return None

    def _peer_reports(self, asking: Sink) -> list[PeerReport]:
        reports = []
        for record in self._here:
            sink = record.sink
            if sink is None or sink is asking:
                continue
            try:
                status, steps = sink.status(), sink.total_steps
            except Exception:  # one sink's report must not break another's display
                logger.debug("status of %r failed", sink, exc_info=True)
                continue
            reports.append(PeerReport(sink.name, status, steps if isinstance(steps, int) else None))
        return reports

    def _load_states(self, states: Mapping[str, Any]) -> None:
        for record in self._here:
            if record.sink is not None and record.sink.name in states:
                record.sink.load_state_dict(states[record.sink.name])

    def _check_state_names(self) -> None:
        seen: dict[str, Sink] = {}
        for sink in self.sinks:
            if type(sink).state_dict is Sink.state_dict:
                continue
            if sink.name in seen:
                raise ValueError(
                    f"two sinks with state are named {sink.name!r} ({seen[sink.name]!r} and {sink!r}); "
                    "their states are saved by name: pass name=... to tell them apart"
                )
            seen[sink.name] = sink

    # -- the checkpoint barrier ----------------------------------------------------------------
    def prepare_checkpoint(self, step: int) -> PreparedCheckpoint | None:
        """The barrier's prepare phase for a checkpoint at ``step`` (on the training thread).

        Asks the control sinks for vetoes (``None`` if one refuses), then flushes every live
        sink and collects their ``state_dict()``. A sink whose flush fails is disabled and
        reported when its policy isolates errors; the checkpoint sink then commits.
        """
        return self._barrier.prepare(step)

    # -- publishers and keys -----------------------------------------------------------------
    def register(self, publisher: Publisher) -> None:
        """Make ``publisher``'s keys known to the bus (publishers call this on construction)."""
        if publisher not in self._publishers:
            self._publishers.append(publisher)

    @property
    def known_keys(self) -> frozenset[str]:
        """Every key the registered publishers provide (eval keys with their ``eval/`` prefix)."""
        return frozenset().union(*(p.bus_keys for p in self._publishers))

    def static_shape(self, key: str) -> tuple[int | None, ...] | None:
        """The shape a publisher declared for ``key`` before step 1 (``()`` a scalar), or ``None``."""
        for publisher in self._publishers:
            shape = getattr(publisher, "shapes", {}).get(key)
            if shape is not None:
                return tuple(shape)
        return None

    def check_keys(self) -> None:
        """Fail, naming the key and the known ones, if a subscriber needs an unknown key."""
        known = self.known_keys
        for record in self._subscribers:
            missing = sorted((record.keys or frozenset()) - known)
            if missing:
                raise UnknownKeyError(
                    f"subscriber {record.name!r} needs key {missing[0]!r}, which no publisher "
                    f"attached to this bus provides; known keys: {sorted(known)}. Construct every "
                    "publisher (an eval EventBusHook too) before the first session starts."
                )

    def start(self) -> None:
        """Mark the run as begun (first publisher ``begin``): keys checked, subscriptions closed,
        every sink that runs here given its :class:`SinkContext`."""
        if not self.started:
            self.check_keys()
            self.started = True
            self._owner = threading.get_ident()
            for record in self._here:
                if record.sink is not None:
                    record.sink.setup(self._context_for(record.sink))
            if self._start_time is None:
                self._start_time = self.clock()
