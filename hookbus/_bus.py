"""The event bus: subscribers in order, the run's state, and the parts that do the work.

:class:`EventBus` is composed, not inherited: it owns its dispatcher (ordered, isolated
delivery), its run scope (``with bus:``, signals, closing), its key registry, the checkpoint
barrier and a port for publishers. Its public surface is what users of a bus need; what only
publishers use is on the port (:class:`hookbus._port.BusPort`), which
:class:`hookbus.PublisherCore` holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import blinker

from hookbus._barrier import Barrier
from hookbus._cluster import Task, check_runs_on
from hookbus._context import EpochProgress, SinkServices
from hookbus._dispatch import Dispatcher
from hookbus._events import SIGNAL_DOCS, Event
from hookbus._keys import KeyRegistry, Publisher, UnknownKeyError
from hookbus._port import BusPort
from hookbus._run import RunScope
from hookbus._schedule import Schedule
from hookbus._state import RunState
from hookbus._stats import BusStats, collect
from hookbus._subscriber import (
    PRIORITY_DEFAULT,
    SIGNALS,
    STEP_SIGNALS,
    Sink,
    check_keys,
    check_on_error,
    check_priority,
)
from hookbus._subscription import Subscriber, Subscription
from hookbus._validate import check_stop_signals, flag

if TYPE_CHECKING:
    from types import TracebackType

    from hookbus._checkpoint import CheckpointBackend
    from hookbus._store import CheckpointStore
    from hookbus._weights import WeightsBackend

__all__ = ["EventBus", "Publisher", "UnknownKeyError"]

logger = logging.getLogger("hookbus")
_SinkT = TypeVar("_SinkT", bound=Sink)


class EventBus:
    """Publishes the training lifecycle to subscribers in a deterministic, isolated order.

    Signals live in the bus's own :class:`blinker.Namespace` and are attributes of the bus
    (``bus.after_run``, ...). Raw blinker receivers (``bus.after_run.connect(fn)``) get every
    published event, unplanned and not isolated; :meth:`on` and :meth:`attach` are the
    scheduled, ordered, isolated path.

    ``with bus:`` is one run: SIGTERM becomes a stop request, an exception from the block is
    published as ``exception`` before every subscriber is closed (exactly once), and the
    exception surfaces unchanged.

    Under ``with bus:`` (on the main thread) SIGTERM — preemption — and every signal in
    ``stop_signals`` become a graceful stop: recorded with its reason, acted on at the next step,
    the final checkpoint saved and every file flushed. The first Ctrl-C is such a stop too, and
    the run then ends by raising ``KeyboardInterrupt`` once everything is written; a second
    Ctrl-C interrupts at once. A Ctrl-C that the process ignores (a background job) stays
    ignored. The previous handlers come back when the run ends.

    Args:
        clock: Monotonic clock for schedules (default :func:`time.monotonic`).
        wall_clock: Clock for ``Event.wall_time`` (default :func:`time.time`).
        stop_signals: More signals that mean "stop gracefully", as numbers or names (default
            none; e.g. ``signal.SIGUSR1``, which SLURM sends before preemption with
            ``--signal=USR1@60``).

    Attributes:
        task: This process's :class:`hookbus.Task` in multi-worker training (its publisher sets
            it as it begins), ``None`` on one machine.
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
        stop_signals: Iterable[int | str] = (),
    ) -> None:
        self._stop_signals = check_stop_signals(stop_signals)
        self.clock = clock
        self.wall_clock = wall_clock
        self.namespace = blinker.Namespace()
        self.signals = {name: self.namespace.signal(name, doc=SIGNAL_DOCS[name]) for name in SIGNALS}
        for name, named in self.signals.items():
            setattr(self, name, named)  # bus.after_run etc., declared above for type checkers
        self._subscribers: list[Subscriber] = []
        self._here: list[Subscriber] = self._subscribers  # those that run on this task
        self.task: Task | None = None
        self._order = 0
        self._version = 0  # bumped on every (un)subscription; publishers re-plan on change
        self._checkpoints: tuple[CheckpointBackend, CheckpointStore] | None = None  # offered by a train publisher
        self._graph_def: Callable[[], bytes | None] | None = None  # offered by a train publisher
        self._weights: WeightsBackend | None = None  # offered by a train publisher holding its model
        self._model_config: Callable[[], str | None] | None = None  # offered by the Keras callback
        self._directions: Callable[[str], str | None] | None = None  # offered by the Keras callback
        self._ends_epochs = False  # the Keras callback under fit
        self._progress: Callable[[], EpochProgress | None] | None = None  # offered by the Keras callback
        self._state = RunState(wall_clock())
        self._keys = KeyRegistry()
        self._dispatcher = Dispatcher(self)
        self._scope = RunScope(self)
        self._barrier = Barrier(self)
        self._port = BusPort(self)
        self._services = SinkServices(self)

    # -- the run, as users see it ------------------------------------------------------------
    @property
    def step(self) -> int:
        """The training step the run has reached (the last step published or passed)."""
        return self._state.step

    @property
    def local_step(self) -> int:
        """Multi-worker: this worker's own training runs in this run (0 on one machine)."""
        return self._state.local_step

    @property
    def should_stop(self) -> bool:
        """Whether a stop was requested in this run (by a subscriber, a signal, another thread)."""
        return self._state.should_stop

    @property
    def stop_reason(self) -> str | None:
        """The first reason a stop was requested for in this run, or ``None``."""
        return self._state.stop_reason

    @property
    def elapsed(self) -> float:
        """Seconds since the run began (0 before)."""
        start = self._state.start_time
        return 0.0 if start is None else self.clock() - start

    @property
    def known_keys(self) -> frozenset[str]:
        """Every key the registered publishers provide (eval keys with their ``eval/`` prefix)."""
        return self._keys.known

    def stats(self) -> BusStats:
        """Each subscriber's health in the current (or last) run, in dispatch order.

        Calls, time on the training thread (timed around each handler call, only on due steps
        and lifecycle signals: a quiet step costs nothing), errors, whether it is disabled, and
        for writers rows queued and written (:class:`hookbus.BusStats`). Cheap; any thread.
        """
        return collect(self._state.step, self._state.due_steps, tuple(self._here))

    def request_stop(self, reason: str, *, step: int | None = None, source: str | None = None) -> None:
        """Stop training at the end of the current step.

        The first reason of the run is kept in :attr:`stop_reason`; every request is
        published as ``stop_requested`` once the current event has reached every subscriber.
        From a thread other than the training thread the request is only recorded: the
        training thread publishes it and stops at its next step.
        """
        self._dispatcher.request_stop(reason, step=step, source=source)

    def close(self, *, raise_errors: bool = True) -> None:
        """Close every attached sink exactly once (idempotent).

        Every sink is closed even if another's ``close`` raises; afterwards the first error of a
        sink whose policy is ``"raise"`` is re-raised when ``raise_errors``.
        """
        self._scope.close(raise_errors=bool(flag("raise_errors", raise_errors)))

    def __enter__(self) -> EventBus:
        self._scope.enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._scope.exit(exc)

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
        if self._state.started:
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
        self._version += 1

    def attach(self, sink: _SinkT) -> _SinkT:
        """Subscribe every ``on_<signal>`` method ``sink`` overrides; returns the sink.

        Raises:
            TypeError: if ``sink`` is not a :class:`Sink`.
            ValueError: if it is already attached.
            RuntimeError: once the run has begun.
        """
        if not isinstance(sink, Sink):
            raise TypeError(f"attach() takes a hookbus.Sink (got {sink!r}); use bus.on() for a function")
        handlers = sink.handlers()  # checks the sink's wiring first (base __init__, handler names)
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
                handlers=handlers,
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

    def _reschedule(self, sink: Sink, schedule: Schedule) -> None:
        """Give an attached ``sink`` a new schedule, counted from the current step (what its
        context's ``reschedule`` does; publishers re-plan on their next step)."""
        for record in self._subscribers:
            if record.sink is sink:
                record.timer = schedule.timer()
                record.timer.reset(self._state.step, self.clock())
                self._version += 1
                return
        raise ValueError(f"{sink!r} is not attached to this bus")

    def detach(self, sink: Sink) -> None:
        """Unsubscribe ``sink`` (it is not closed). Raises ValueError if it is not attached."""
        for record in self._subscribers:
            if record.sink is sink:
                self._remove(record)
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

    def _remove(self, record: Subscriber) -> None:
        """Remove a subscriber record (what :meth:`Subscription.disconnect` calls)."""
        if record in self._subscribers:
            self._subscribers.remove(record)
            self._locate()

    def _is_subscribed(self, record: Subscriber) -> bool:
        return record in self._subscribers

    # -- what the port does for publishers ---------------------------------------------------
    def _set_task(self, task: Task | None) -> None:
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

    def _start(self, publisher: Publisher) -> None:
        state = self._state
        if not state.started and not state.in_run:
            self._scope.open_implicit()  # no `with bus:`: the run closes at exit, or at bus.close()
        self._keys.begun(publisher)
        if not state.started:
            self._keys.check(self._subscribers)
            state.started = True
            state.owner = threading.get_ident()
            for record in self._here:
                if record.sink is not None:
                    record.sink.setup(self._services.context_for(record.sink))
            if state.start_time is None:
                state.start_time = self.clock()

    def _event(self, signal: str, *, step: int, mode: str = "train", **fields: Any) -> Event:
        task = self.task
        if task is not None:
            fields.update(task_type=task.type, task_index=task.index, local_step=self._state.local_step)
        wall_time, elapsed = self.wall_clock(), self.elapsed
        return Event(signal, step, mode, wall_time=wall_time, elapsed=elapsed, _stop=self._stop_at, **fields)

    def _stop_at(self, reason: str, step: int) -> None:
        self._dispatcher.request_stop(reason, step=step)
