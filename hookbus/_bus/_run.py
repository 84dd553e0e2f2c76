"""The run scope of a bus: ``with bus:``, a publisher's begin, SIGTERM as a stop request,
closing every sink once, and the run files an evaluator task reads (a part of :class:`hookbus.EventBus`)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import signal as signal_module
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any

from hookbus._bus._alarm import STOP_DEADLINE_SECS, Alarm
from hookbus._bus._evaluated import EvaluatedSteps
from hookbus._checkpoints._run_files import POLL_SECS, EvaluatorLink, RunFiles

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from hookbus._bus._dispatch import Dispatcher
    from hookbus._bus._keys import KeyRegistry, Publisher
    from hookbus._bus._roster import Roster
    from hookbus._bus._sampler import SystemMetrics
    from hookbus._bus._state import RunState
    from hookbus._bus._stops import Stops
    from hookbus._bus._subscription import Subscriber
    from hookbus._contract._context import SinkContext
    from hookbus._contract._sink import Sink

__all__ = ["RunScope"]

logger = logging.getLogger("hookbus")


class RunScope:
    """Begins and ends runs; turns stop signals into stop requests; closes every sink once.

    Args:
        state: The run's progress (reset per run; ``started`` and the times are written here).
        roster: Who is subscribed (fresh schedules per run; the sinks to set up and close).
        stops: The run's stops (reset per run; signals and an evaluator's stop go there).
        dispatcher: Delivery (reset per run; publishes ``exception``).
        keys: The publishers' key registry (checked as the first publisher begins).
        contexts: The :class:`~hookbus.sink_api.SinkContext` each sink is set up with.
        clock, wall_clock: The bus's clocks.
        stop_signals: Signals that mean "stop gracefully" under ``with bus:`` (beside SIGINT).
        handle_signals: Whether ``with bus:`` installs its signal handlers.
        system: The machine's sampler (the publishers' core starts it once ``begin`` reached the
            sinks): stopped here, its last sample taken and its thread joined, before any sink closes.

    Attributes:
        runs: Runs begun so far (1 during the first): what a publisher counts its sessions per.
        previous_step: The step the previous run ended at (``None`` in the first run).
        evaluated: One evaluation per training step in this run (:mod:`hookbus._bus._evaluated`).
    """

    def __init__(
        self,
        *,
        state: RunState,
        roster: Roster,
        stops: Stops,
        dispatcher: Dispatcher,
        keys: KeyRegistry,
        contexts: Callable[[Sink], SinkContext],
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        stop_signals: tuple[int, ...],
        handle_signals: bool = True,
        system: SystemMetrics | None = None,
    ) -> None:
        self._state = state
        self._system = system
        self._roster = roster
        self._stops = stops
        self._dispatcher = dispatcher
        self._keys = keys
        self._contexts = contexts
        self._clock = clock
        self._wall_clock = wall_clock
        self._stop_signals = stop_signals
        self._handle_signals = handle_signals  # False: `with bus:` installs no handler
        self.runs = 0
        self.previous_step: int | None = None
        self.in_run = False  # inside `with bus:`
        self.implicit = False  # a run a publisher opened without `with bus:`
        self.evaluated = EvaluatedSteps()
        self._closed: set[int] = set()
        self._interrupted = False  # a first Ctrl-C asked for a graceful stop
        self._signalled: int | None = None  # the first other stop signal of the run, handed on at its end
        self._previous_handlers: dict[int, Any] = {}  # the handlers `with bus:` replaced, by signal
        self._ended_over: dict[int, Any] = {}  # what it replaced, where this run ended under another's
        self._evaluator: EvaluatorLink | None = None
        self._when_closed: list[Callable[[], None]] = []  # publishers' clean-ups (when_closed)
        #: The run's timer thread: marks the publishers' next due times passed (a quiet step reads
        #: a flag, not the clock); started when a run begins, stopped when it closes.
        self.alarm = Alarm()
        stops.watch(self._evaluator_stop, every_secs=POLL_SECS)  # the link reads its files as often

    # -- signals (SIGTERM) -------------------------------------------------------------------------
    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        # The first Ctrl-C is a graceful stop (final checkpoint, flushed files; the run then ends
        # with KeyboardInterrupt, so the exit status still says interrupted); a second interrupts.
        if self._interrupted:
            raise KeyboardInterrupt
        self._interrupted = True
        self._on_stop_signal(signum, frame)

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        # Runs between bytecodes on the main thread: only record it; the publisher acts on it at
        # its next step (Stops.poll, from the publishers' core).
        if signum != signal_module.SIGINT and self._signalled is None:
            self._signalled = signum
        self._stops.from_signal(signum)

    # -- an evaluator task beside training -------------------------------------------------------
    def link_evaluator(self) -> None:
        """Listen for an evaluator's stop and mark the run's end in the checkpoint directory.

        A train publisher's core calls it as it begins. It applies where this process saves
        checkpoints (one machine, or the chief) and exactly one attached sink saves them.
        """
        task = self._roster.task
        if self._evaluator is not None or (task is not None and not task.is_chief):
            return
        directories = {d for s in self._roster.sinks if (d := s.checkpoint_directory) is not None}
        if len(directories) == 1:
            self._evaluator = EvaluatorLink(RunFiles(directories.pop()), since=self._state.wall_start)

    def _evaluator_stop(self) -> tuple[str, str] | None:
        """An evaluator's new stop (what :class:`~hookbus._bus._stops.Stops` polls every step)."""
        link = self._evaluator
        found = None if link is None else link.poll(self._clock())
        if found is None:
            return None
        reason, step = found
        return f"evaluator: {reason} (evaluated step {step})", "evaluator"

    def _mark_ended(self) -> None:
        link, self._evaluator = self._evaluator, None
        if link is not None:
            try:
                link.files.mark_ended(self._state.step, self._wall_clock())
            except OSError:  # a full or read-only disk must not mask how the run ended
                logger.exception("could not record the end of the run for an evaluator")

    # -- run scope ---------------------------------------------------------------------------
    def _new_run(self) -> None:
        state = self._state
        self._keys.new_run()
        self.previous_step = state.step if self.runs else None
        self.runs += 1
        state.reset(self._wall_clock(), self._clock())
        self._stops.reset()
        self._dispatcher.reset()
        self.alarm.start()  # before the first step: starting a thread there would hold it
        self._roster.new_run()  # one run each: schedules and error counts start afresh
        self.evaluated = EvaluatedSteps()
        self._closed = set()
        self._interrupted = False
        self._signalled = None
        self._evaluator = None

    def start(self, publisher: Publisher) -> None:
        """``publisher`` begins: a run opens if none is (no ``with bus:``); the first publisher
        of a run checks every subscriber's keys, closes subscriptions, names the training
        thread and sets every sink here up with its context."""
        state = self._state
        if not state.started and not self.in_run:
            self.open_implicit()  # no `with bus:`: the run closes at exit, or at bus.close()
        self._keys.begun(publisher)
        if not state.started:
            self._keys.check(self._roster.records)
            state.started = True
            self._stops.owner = threading.get_ident()
            for record in self._roster.here:
                if record.sink is not None:
                    record.sink.setup(self._contexts(record.sink))
            if state.start_time is None:
                state.start_time = self._clock()

    def open_implicit(self) -> None:
        """A publisher begins outside ``with bus:``: open a run that closes at interpreter exit,
        at :meth:`close`, or when the bus enters ``with bus:`` — forgetting ``with bus:`` loses
        nothing on a clean end. (No signal handlers: only ``with bus:`` installs them.)"""
        self._new_run()
        self.implicit = True
        _implicit_runs.add(self)

    def enter(self) -> None:
        if self.in_run:
            raise RuntimeError("this bus is already running; one `with bus:` at a time")
        if self.implicit:
            self.close()  # the run a publisher opened without `with bus:` ends here
        self._new_run()
        self.in_run = True
        if self._handle_signals and threading.current_thread() is threading.main_thread():
            handlers: dict[int, Any] = {signum: self._on_stop_signal for signum in self._stop_signals}
            if signal_module.getsignal(signal_module.SIGINT) is not signal_module.SIG_IGN:  # a background job
                handlers[signal_module.SIGINT] = self._on_sigint
            self._previous_handlers = {signum: signal_module.signal(signum, h) for signum, h in handlers.items()}
            self._ended_over = {}

    def exit(self, exc: BaseException | None) -> None:
        handed: dict[int, Any] = {}  # where a stop signal goes on to: what is put back below
        try:
            if exc is not None:
                self._dispatcher.publish_exception(exc)
            else:
                # A signal (or another thread's stop) that came after the last publisher ended,
                # between two sessions: no step polls it any more, so it is published here, and
                # the run ends "stopped" everywhere, as the KeyboardInterrupt below says.
                self._stops.poll()
            self.close(raise_errors=exc is None)
        finally:
            handed = self._restore_handlers()
            self.in_run = False
            self._stops.owner = None  # no training thread until the next run's first publisher begins
            self._state.started = False  # the run is over: sinks and functions may be (un)subscribed again
        if self._interrupted and exc is None:
            # The first Ctrl-C stopped the run gracefully: everything is saved and closed; the
            # program is still interrupted, as the user asked (exit status, tracebacks, REPLs).
            raise KeyboardInterrupt("stopped gracefully after Ctrl-C; the final checkpoint and files are written")
        signalled, self._signalled = self._signalled, None
        if signalled is not None and exc is None:
            _hand_on(signalled, handed.get(signalled))

    def _restore_handlers(self) -> dict[int, Any]:
        """Put back the handlers `with bus:` replaced, where this run's are still installed. Runs of
        two buses may end in any order (not only nested): a handler another run installed over this
        one's stays, and this run remembers what it replaced, so that the run ending after it puts
        back the program's handler, never the handler of a run that has ended. Returns, by signal,
        the live handler below this run's (where a stop signal goes on to)."""
        handed: dict[int, Any] = {}
        for signum, previous in self._previous_handlers.items():
            mine = self._on_sigint if signum == signal_module.SIGINT else self._on_stop_signal
            if signal_module.getsignal(signum) != mine:
                self._ended_over[signum] = previous  # another run's handler is on top: it puts this back
                handed[signum] = _outlived(signum, previous, keep=True)
                continue
            previous = handed[signum] = _outlived(signum, previous)
            # None: the previous handler was not installed from Python; the default is the
            # closest that can be restored.
            signal_module.signal(signum, signal_module.SIG_DFL if previous is None else previous)
        self._previous_handlers = {}
        return handed

    def when_closed(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once when this run closes, after its subscribers (see ``PublisherCore.when_run_closes``)."""
        if fn not in self._when_closed:
            self._when_closed.append(fn)

    def _run_closed(self) -> None:
        waiting, self._when_closed = self._when_closed, []
        for fn in waiting:
            try:
                fn()
            except Exception:  # a publisher's clean-up must not hide how the run ended, nor skip the others
                logger.exception("a publisher's clean-up at the end of the run failed")

    def close(self, *, raise_errors: bool = True) -> None:
        """See :meth:`hookbus.EventBus.close`."""
        self._mark_ended()  # an evaluator waiting for new checkpoints ends too (once)
        if not self.alarm.stop():
            logger.warning("hookbus's timer thread did not end within %s s", STOP_DEADLINE_SECS)
        if self.implicit:
            self.implicit = False
            self._state.started = False  # a later publisher opens a new run
            self._stops.owner = None
            _implicit_runs.discard(self)
        first: BaseException | None = None
        interrupt: BaseException | None = None
        if self._system is not None:
            # Before any sink closes: the last sample reaches them all, then nothing more does.
            try:
                sampled = self._system.stop()
            except BaseException as stopped:  # Ctrl-C while joining: the sinks still close, then it surfaces
                interrupt, sampled = stopped, []
            for error in sampled:  # an on_error="raise" handler that failed on the sampler's thread
                first = first or error
        # A sink that reports on the others (the dashboard's summary) closes after them, so that
        # what their closes failed or cut is in its report. A snapshot: a sink may detach itself.
        records = sorted(tuple(self._roster.records), key=lambda r: r.sink is not None and r.sink.closes_last)
        for record in records:
            sink, worker = record.sink, record.worker
            if worker is not None:  # a function on its own thread: what waits gets its deadline
                try:
                    failures: list[Exception] = worker.close()
                except Exception as failed:  # its thread died of more than the function's error
                    failures = [failed]
                except BaseException as stopped:
                    interrupt = interrupt or stopped
                    continue
                for failure in failures:  # raised on its thread after its last call: reported here
                    self._closed_with(record, failure)
                    if record.on_error == "raise" and first is None:
                        first = failure
                continue
            if sink is None or id(sink) in self._closed:
                continue
            self._closed.add(id(sink))
            try:
                sink.close()
            except Exception as error:  # close the rest first
                self._closed_with(record, error)
                if record.on_error == "raise" and first is None:
                    first = error
            except BaseException as error:  # Ctrl-C during a close: the others still close, then it surfaces
                if interrupt is None:
                    interrupt = error
        self._run_closed()
        if interrupt is not None:
            raise interrupt
        if first is not None and raise_errors:
            raise first

    def _closed_with(self, record: Subscriber, error: Exception) -> None:
        """``record``'s close failed (a background write that failed, an error its own thread raised
        last): counted in its errors and published as ``subscriber_error`` to the sinks not closed
        yet (the dashboard's summary among them), never reported as "ok". A disabled subscriber's
        close repeats the failure it was disabled for, reported then: it is logged only."""
        logger.error("closing %r failed", record.name, exc_info=error)
        if record.disabled:  # disabled for a failure reported then; its close repeats it
            return
        record.failed(disable=False)
        try:
            self._dispatcher.announce_error(record, "close", self._state.step, error)
        except Exception:  # a report must not keep the other sinks from closing
            logger.exception("reporting the failed close of %r failed", record.name)


def _outlived(signum: int, handler: Any, *, keep: bool = False) -> Any:
    """``handler``, or, where it is the handler of a run that has ended since (under this one), what
    that run replaced, followed down to a live handler (taken from the ended runs' records, unless
    ``keep``: the run still on top takes them when it ends)."""
    while True:
        scope = getattr(handler, "__self__", None)
        if not isinstance(scope, RunScope) or scope.in_run or signum not in scope._ended_over:
            return handler
        handler = scope._ended_over[signum] if keep else scope._ended_over.pop(signum)


def _hand_on(signum: int, previous: Any) -> None:
    """The run a stop signal stopped has ended (saved, flushed, closed): the signal goes on to the
    handler ``with bus:`` replaced, as if it came now. A handler of the program's is called; the
    default action is taken (SIGTERM's ends the process, its status saying so, what was printed
    flushed first), so a process asked to end never goes on as if its training had finished (a test
    runner to its next test, a script past ``with bus:`` to its next step); an ignored signal stays
    ignored."""
    if callable(previous):
        previous(signum, None)
    elif previous is None or previous == signal_module.SIG_DFL:  # None: not installed from Python
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, OSError, ValueError):  # gone, closed, a broken pipe
                stream.flush()
        signal_module.raise_signal(signum)  # `with bus:` put the default back on exit


#: Runs that publishers opened without ``with bus:`` and that are still open; closed at exit.
#: Weak: a bus that is gone takes its run along (atexit must not keep every bus alive).
_implicit_runs: weakref.WeakSet[RunScope] = weakref.WeakSet()


@atexit.register
def _close_implicit_runs() -> None:
    for scope in list(_implicit_runs):
        try:
            scope.close(raise_errors=False)
        except BaseException:  # the interpreter is exiting: report, and close the others
            logger.exception("closing a run at interpreter exit failed")
