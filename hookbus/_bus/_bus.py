"""The event bus: the composition root of its parts, and the user's API.

:class:`EventBus` is composed, not inherited. It builds its parts and hands each the
collaborators it needs, never the bus: the roster (who is subscribed, in order), the stops
(every stop request and the answer), the run's progress, the dispatcher (ordered, isolated
delivery), the checkpoint barrier, the sinks' contexts, the run scope (``with bus:``, a
publisher's begin, signals, closing) and a port for publishers. Its public surface is what
users of a bus need; the parts only publishers use are handed to them on the port
(:class:`hookbus._bus._port.BusPort`), which :class:`hookbus.publisher_api.PublisherCore` holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar, cast, overload

import blinker

from hookbus._bus._barrier import Barrier
from hookbus._bus._dispatch import Dispatcher
from hookbus._bus._keys import KeyRegistry
from hookbus._bus._offers import Offers
from hookbus._bus._offthread import OffThread
from hookbus._bus._port import BusPort
from hookbus._bus._roster import Roster
from hookbus._bus._run import RunScope
from hookbus._bus._sampler import SystemMetrics
from hookbus._bus._services import SinkServices
from hookbus._bus._state import RunState
from hookbus._bus._stops import Stops
from hookbus._bus._subscriber_view import SubscriberView, views
from hookbus._bus._subscription import Subscriber
from hookbus._contract._cluster import check_runs_on
from hookbus._contract._events import SIGNAL_DOCS
from hookbus._contract._schedule import Schedule
from hookbus._contract._sink import (
    PRIORITY_DEFAULT,
    SIGNALS,
    STEP_SIGNALS,
    Sink,
    check_keys,
    check_on_error,
    check_priority,
)
from hookbus._contract._stats import BusStats
from hookbus._rules._validate import check_stop_signals, flag, positive_int, seconds, seconds_or_off

if TYPE_CHECKING:
    from types import TracebackType

    from hookbus._checkpoints._store import CheckpointStore
    from hookbus._contract._cluster import Task

__all__ = ["EventBus", "Subscription", "mark_evaluated"]

logger = logging.getLogger("hookbus")
_SinkT = TypeVar("_SinkT", bound=Sink)
_P = ParamSpec("_P")
_R = TypeVar("_R")
_QUEUE_SIZE = 1024  # bus.on(background=True)'s defaults: the writers' queue and close deadline
_CLOSE_DEADLINE = 10.0
#: Seconds between two samples of the machine by default (W&B's period; MLflow's is 10 s too).
SYSTEM_METRICS_SECS = 10.0


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
    the final checkpoint saved and every file flushed; once the run has ended, the signal goes on
    to the handler ``with bus:`` replaced, as if it came then: by default the process ends as the
    signal asks (what it printed flushed), so nothing after ``with bus:`` runs as if training had
    finished; a handler the program installed before ``with bus:`` is called instead. The first
    Ctrl-C is such a stop too, and the run then ends by raising ``KeyboardInterrupt`` once
    everything is written; a second Ctrl-C interrupts at once. A Ctrl-C that the process ignores
    (a background job) stays ignored. The previous handlers come back when the run ends.

    Args:
        clock: Monotonic clock for schedules (default :func:`time.monotonic`).
        wall_clock: Clock for ``Event.wall_time`` (default :func:`time.time`).
        stop_signals: More signals that mean "stop gracefully", as numbers or names (default
            none; e.g. ``signal.SIGUSR1``, which SLURM sends before preemption with
            ``--signal=USR1@60``).
        handle_signals: Whether ``with bus:`` takes over Ctrl-C, SIGTERM and ``stop_signals`` as
            above (default ``True``). ``False`` leaves every signal handler as the program set it:
            for a bus inside a program with its own handling (``hookbus watch``'s views replay
            logs on such buses, and the watcher keeps its own Ctrl-C).
        system_metrics: Seconds between two samples of the machine (default 10.0), or ``False``
            to sample nothing (``True``: the default period). Each run samples this process's
            CPU and resident memory, the host's CPU, memory, disk and network, and each GPU this
            process uses (NVML: utilization, memory, power; TensorFlow's allocator, current and
            peak) on a thread of its own, never the training thread, from the moment its first
            publisher begins, every ``system_metrics`` seconds and once more as the run closes
            (the thread is then joined, within 5 s). Each sample is published on the ``system``
            signal, carrying the latest training step, so samples go on while training is stalled;
            the dashboard, TensorBoard, the event log and ``CSVSink(system=True)`` show them. Where
            NVML or a GPU is absent, the first sample says why (and it is logged once). At the
            default period the thread costs well under 0.1 % of one core (bench/system_metrics.py).

    Attributes:
        task: This process's :class:`hookbus.Task` in multi-worker training (its publisher sets
            it as it begins), ``None`` on one machine.
    """

    begin: blinker.NamedSignal
    after_create_session: blinker.NamedSignal
    session_created: blinker.NamedSignal
    waiting_for_step: blinker.NamedSignal
    before_run: blinker.NamedSignal
    after_run: blinker.NamedSignal
    end: blinker.NamedSignal
    stop_requested: blinker.NamedSignal
    subscriber_error: blinker.NamedSignal
    exception: blinker.NamedSignal
    checkpoint_saving: blinker.NamedSignal
    checkpoint_saved: blinker.NamedSignal
    learning_rate_changed: blinker.NamedSignal
    model_exported: blinker.NamedSignal
    system: blinker.NamedSignal

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        stop_signals: Iterable[int | str] = (),
        handle_signals: bool = True,
        system_metrics: float | Literal[False] = SYSTEM_METRICS_SECS,
    ) -> None:
        stop_signals_checked = check_stop_signals(stop_signals)
        flag("handle_signals", handle_signals)
        system_interval = seconds_or_off("system_metrics", system_metrics, SYSTEM_METRICS_SECS)
        self.clock = clock
        self.wall_clock = wall_clock
        self.namespace = blinker.Namespace()
        self.signals = {name: self.namespace.signal(name, doc=SIGNAL_DOCS[name]) for name in SIGNALS}
        for name, named in self.signals.items():
            setattr(self, name, named)  # bus.after_run etc., declared above for type checkers
        # The composition: each part gets its collaborators, never the bus. The clocks are read
        # through the bus's attributes, which stay settable (a replay runs the bus on the log's
        # recorded times); parts read them on due steps and at run edges only.
        clock = lambda: self.clock()  # noqa: E731 - a closure over the settable attribute
        wall_clock = lambda: self.wall_clock()  # noqa: E731
        self._roster = roster = Roster()
        self._state = state = RunState(wall_clock())
        self._stops = stops = Stops(
            step=lambda: state.step,
            wall_clock=wall_clock,
            who=lambda: self._dispatcher.current_name(),
            deliver=lambda: self._dispatcher.settle(),
            clock=clock,
        )
        self._keys = keys = KeyRegistry()
        self._dispatcher = dispatcher = Dispatcher(roster, stops, state, self.signals, sender=self)
        offers = Offers()
        barrier = Barrier(roster, dispatcher.announce_error)
        services = SinkServices(
            roster=roster,
            keys=keys,
            state=state,
            dispatcher=dispatcher,
            barrier=barrier,
            offers=offers,
            clock=clock,
            stats=self.stats,
        )
        self._system = system = SystemMetrics(
            system_interval,
            roster=roster,
            state=state,
            stops=stops,
            signal=self.signals["system"],
            sender=self,
            clock=clock,
            wall_clock=wall_clock,
            offered=lambda: offers.machine,
        )
        self._scope = scope = RunScope(
            state=state,
            roster=roster,
            stops=stops,
            dispatcher=dispatcher,
            keys=keys,
            contexts=services.context_for,
            clock=clock,
            wall_clock=wall_clock,
            stop_signals=stop_signals_checked,
            handle_signals=handle_signals,
            system=system,
        )
        self._port = BusPort(
            roster=roster,
            keys=keys,
            state=state,
            stops=stops,
            dispatcher=dispatcher,
            barrier=barrier,
            scope=scope,
            offers=offers,
            clock=clock,
            wall_clock=wall_clock,
            set_task=self._set_task,
            system=system,
        )
        self.task: Task | None = None

    def _set_task(self, task: Task | None) -> None:
        """What the port's ``set_task`` does: the roster runs as ``task``; :attr:`task` shows it."""
        self._roster.set_task(task)
        self.task = task

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
        return self._stops.requested

    @property
    def stop_reason(self) -> str | None:
        """The first reason a stop was requested for in this run, or ``None``."""
        return self._stops.reason

    @property
    def elapsed(self) -> float:
        """Seconds since the run began (0 before)."""
        return self._state.elapsed(self.clock())

    @property
    def system_metrics(self) -> float | None:
        """Seconds between two samples of the machine, or ``None`` when off."""
        return self._system.interval

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
        return self._roster.stats(self._state.step, self._dispatcher.due_steps)

    def request_stop(self, reason: str, *, step: int | None = None, source: str | None = None) -> None:
        """Stop training at the end of the current step.

        The first reason of the run is kept in :attr:`stop_reason`; every request is
        published as ``stop_requested`` once the current event has reached every subscriber.
        From a thread other than the training thread the request is only recorded: the
        training thread publishes it and stops at its next step.
        """
        self._stops.request(reason, step=step, source=source)

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
    def subscribers(self) -> list[SubscriberView]:
        """Every subscriber, in dispatch order (priority, then registration): read-only views."""
        return views(self._roster.records)

    @property
    def sinks(self) -> list[Sink]:
        """The attached sinks, in dispatch order."""
        return self._roster.sinks

    def _add(self, record: Subscriber) -> None:
        if self._state.started:
            raise RuntimeError(
                f"cannot subscribe {record.name!r} after the run began; attach every sink and "
                "function before the first session starts"
            )
        self._roster.add(record)

    def attach(self, sink: _SinkT) -> _SinkT:
        """Subscribe every ``on_<signal>`` method ``sink`` overrides; returns the sink.

        Raises:
            TypeError: if ``sink`` is not a :class:`Sink`.
            ValueError: if it is already attached.
            RuntimeError: once the run has begun.
        """
        if not isinstance(sink, Sink):
            raise TypeError(f"attach() takes a hookbus.sink_api.Sink (got {sink!r}); use bus.on() for a function")
        handlers = sink.handlers()  # checks the sink's wiring first (base __init__, handler names)
        if self._roster.record_of(sink) is not None:
            raise ValueError(f"{sink!r} is already attached to this bus")
        if not sink.controls_training and type(sink).checkpoint_veto is not Sink.checkpoint_veto:
            raise TypeError(
                f"{type(sink).__name__} overrides checkpoint_veto() but does not control training; only "
                "control sinks may veto a checkpoint: set controls_training = True on the class"
            )
        self._add(
            Subscriber(
                name=sink.name,
                handlers=handlers,
                schedule=sink.schedule,
                keys=sink.keys,
                priority=sink.priority,
                on_error=sink.on_error,
                order=self._roster.next_order(),
                sink=sink,
                runs_on=sink.runs_on,
            )
        )
        return sink

    def detach(self, sink: Sink) -> None:
        """Unsubscribe ``sink`` (it is not closed). Raises ValueError if it is not attached."""
        self._roster.remove(self._roster.attached(sink))

    @overload
    def on(
        self,
        signal: str,
        fn: Callable[_P, _R],
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
        background: bool = False,
        queue_size: int | None = None,
        close_deadline: float | None = None,
    ) -> Subscription[_P, _R]: ...

    @overload
    def on(
        self,
        signal: str,
        fn: None = None,
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
        background: bool = False,
        queue_size: int | None = None,
        close_deadline: float | None = None,
    ) -> Callable[[Callable[_P, _R]], Subscription[_P, _R]]: ...

    def on(
        self,
        signal: str,
        fn: Callable[_P, _R] | None = None,
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
        background: bool = False,
        queue_size: int | None = None,
        close_deadline: float | None = None,
    ) -> Subscription[_P, _R] | Callable[[Callable[_P, _R]], Subscription[_P, _R]]:
        """Subscribe a function to ``signal``; usable as a decorator.

        The function is held strongly (a lambda or closure cannot vanish) and receives the
        signal's payload. For ``before_run`` and ``after_run`` the schedule arguments apply
        (default: every step); other signals take no schedule.

        Args:
            signal: One of the bus's signal names.
            fn: The function; omit it to use ``on`` as a decorator.
            every_n_steps: The schedule (:class:`Schedule`).
            every_n_secs: With ``every_n_steps``, above.
            at_begin: With ``every_n_steps``, above.
            at_end: With ``every_n_steps``, above.
            keys: Keys the function needs (default ``None``: every key).
            priority: Lower runs first (default 100, after control sinks and checkpoints).
            on_error: ``"raise"`` (default), ``"isolate"`` or ``"disable"``.
            name: Shown in reports (default: the function's qualified name).
            runs_on: ``"all"`` (default) or ``"chief"``: where it runs in multi-worker training.
            background: Call the function on a thread of its own (default ``False``: on the
                training thread, which waits for it). For a function that waits on the network
                (a webhook, a notifier): the training thread only puts the event in a bounded
                queue, which blocks when full (nothing is dropped; training slows only if the
                function cannot keep up on average; a queue that stays full while the function
                finishes nothing for 30 s, the writers' flush deadline, gives the thread up as a
                stalled writer: ``WriterStalled`` under ``on_error``, its events counted lost);
                the function receives the events in order.
                Its errors follow ``on_error``, reported on the training thread: an error on
                the thread is raised again by the subscriber's next call (isolated, disabled or
                raised there, as for any subscriber: ``"raise"`` ends training at that call) or,
                without one, by the run's close; under ``"raise"`` and ``"disable"`` the function
                is not called again after its error. ``event.request_stop`` from the thread is
                recorded and acted on at the training thread's next step. At the run's close the
                queue gets ``close_deadline`` seconds; the events the function did not receive
                by then are counted lost, never waited for: ``bus.stats()[name].writer`` holds
                its queue and the events given, delivered and lost, and the dashboard's summary
                never counts it "ok" after an error or a loss. Not for ``"begin"``, whose
                failures must stop a run before its first step.
            queue_size: With ``background=True``, the events that may wait before the training
                thread blocks (default 1024).
            close_deadline: With ``background=True``, the seconds the run's close waits for the
                function to receive what waits (default 10.0).

        Returns:
            A :class:`Subscription` (callable like the function, with its parameters and return
            type; ``disconnect()``; a context manager), or, without ``fn``, a decorator returning
            one: ``@bus.on("after_run")`` is a typed decorator under strict mypy.
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
        threaded = _background_options(signal, background, queue_size, close_deadline)

        def subscribe(func: Callable[_P, _R]) -> Subscription[_P, _R]:
            if not callable(func):
                raise TypeError(f"bus.on() needs a callable (got {func!r})")
            label = name or str(getattr(func, "__qualname__", repr(func)))
            handler = cast("Callable[[Any], None]", func)  # called with the payload alone
            worker = None
            if threaded is not None:
                worker = OffThread(
                    label, handler, on_error=checked_policy, queue_size=threaded[0], close_deadline=threaded[1]
                )
                handler = worker.deliver
            record = Subscriber(
                name=label,
                handlers={signal: handler},
                schedule=schedule,
                keys=checked_keys,
                priority=checked_priority,
                on_error=checked_policy,
                order=self._roster.next_order(),
                runs_on=runs_on,
                worker=worker,
            )
            self._add(record)
            roster = self._roster

            def disconnect() -> None:
                roster.remove(record)
                if worker is not None:  # its thread ends now: what waits gets the close deadline
                    for error in worker.close():
                        logger.error("subscriber %r raised on its own thread", record.name, exc_info=error)

            return Subscription(
                self,
                signal,
                func,
                name=record.name,
                connected=lambda: record in roster,
                disconnect=disconnect,
            )

        return subscribe if fn is None else subscribe(fn)


def _background_options(
    signal: str, background: object, queue_size: object, close_deadline: object
) -> tuple[int, float] | None:
    """``bus.on``'s thread options, checked: ``(queue_size, close_deadline)``, or ``None`` on the
    training thread."""
    if not flag("background", background):
        options = (("queue_size", queue_size), ("close_deadline", close_deadline))
        given = [f"{argument}={value!r}" for argument, value in options if value is not None]
        if given:
            raise ValueError(
                f"{' and '.join(given)} apply to a subscriber on a thread of its own; pass background=True too"
            )
        return None
    if signal == "begin":
        raise ValueError(
            "background=True is not for 'begin': a failure at begin must stop the run before its first step, "
            "on the training thread"
        )
    size = _QUEUE_SIZE if queue_size is None else positive_int("queue_size", queue_size)
    deadline = _CLOSE_DEADLINE if close_deadline is None else seconds("close_deadline", close_deadline)
    return size, deadline


class Subscription(Generic[_P, _R]):
    """Handle returned by :meth:`EventBus.on`, generic in the function's parameters and result.

    Calling it calls the function (so ``@bus.on(...)`` keeps the function usable, with its
    signature); :meth:`disconnect` removes it, and ``with bus.on(...):`` subscribes for a block
    only. Made by the bus; its arguments are the bus's.

    Args:
        bus: The bus subscribed to.
        signal: The signal's name.
        fn: The function.
        name: The subscriber's name in reports.
        connected: Whether the function is still subscribed.
        disconnect: Unsubscribes it (harmless when done already).
    """

    def __init__(
        self,
        bus: EventBus,
        signal: str,
        fn: Callable[_P, _R],
        *,
        name: str,
        connected: Callable[[], bool],
        disconnect: Callable[[], None],
    ) -> None:
        self.bus = bus
        self.signal = signal
        self.fn = fn
        self.name = name
        self._connected = connected
        self._disconnect = disconnect

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return self.fn(*args, **kwargs)

    @property
    def connected(self) -> bool:
        """Whether the function is still subscribed."""
        return self._connected()

    def disconnect(self) -> None:
        """Unsubscribe; harmless if already done."""
        self._disconnect()

    def __enter__(self) -> Subscription[_P, _R]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.disconnect()

    def __repr__(self) -> str:
        return f"<Subscription {self.name!r} to {self.signal!r}>"


def mark_evaluated(bus: EventBus, prefix: str, store: CheckpointStore) -> None:
    """Checkpoint ``prefix`` of ``bus``'s run has been evaluated: what ``train_and_evaluate``,
    whose hooks hold their own cores, marks (see :meth:`hookbus._bus._barrier.Barrier.mark_evaluated`).
    ``store`` is the layout it lives in, used where no publisher of the bus offers one."""
    port = bus._port
    offered = port.offers.checkpoints
    port.barrier.mark_evaluated(offered[1] if offered is not None else store, prefix)
