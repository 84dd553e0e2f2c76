"""The run scope of a bus: ``with bus:``, SIGTERM as a stop request, closing every sink once,
and the records an evaluator task reads (a part of :class:`hookbus.EventBus`)."""

from __future__ import annotations

import atexit
import logging
import signal as signal_module
import threading
import weakref
from typing import TYPE_CHECKING, Any

from hookbus._records import EvaluatorLink, RunRecords
from hookbus._stats import Usage

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from hookbus._bus import EventBus

__all__ = ["RunScope"]

logger = logging.getLogger("hookbus")


class RunScope:
    """Begins and ends runs of ``bus``; turns signals and other threads' stops into requests."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        #: Runs begun so far (1 during the first): what a publisher counts its sessions per.
        self.runs = 0
        #: The step the previous run of this bus ended at (``None`` in the first run).
        self.previous_step: int | None = None

    # -- signals (SIGTERM) and stops from elsewhere ----------------------------------------------
    def poll(self, before: Callable[[], object] | None = None) -> None:
        """Turn a signal, another thread's stop or an evaluator's into a stop request here.

        Publishers call it (through their core) on the training thread after every step.
        ``before`` runs once before the first request is published (a publisher that estimated
        the step reads it there, so the stop and its checkpoint carry the exact step).
        """
        bus, state = self._bus, self._bus._state
        requests: list[tuple[str, str]] = []
        if state.signal_stop is not None:
            name, state.signal_stop = state.signal_stop, None
            requests.append((f"received {name}", "signal"))
        while state.foreign_stops:
            requests.append(state.foreign_stops.pop(0))
        link = state.evaluator
        if link is not None:
            found = link.poll(bus.clock())
            if found is not None:
                reason, step = found
                requests.append((f"evaluator: {reason} (evaluated step {step})", "evaluator"))
        if requests and before is not None:
            before()
        for reason, source in requests:
            bus.request_stop(reason, source=source)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        # The first Ctrl-C is a graceful stop (final checkpoint, flushed files; the run then ends
        # with KeyboardInterrupt, so the exit status still says interrupted); a second interrupts.
        state = self._bus._state
        if state.interrupted:
            raise KeyboardInterrupt
        state.interrupted = True
        self._on_stop_signal(signum, frame)

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        # Runs between bytecodes on the main thread: only record it; the publisher acts on it at
        # its next step. The reason is kept now, so a signal that ends the run before any step
        # (during begin) still says why (a requeue script reads bus.stop_reason).
        state = self._bus._state
        name = signal_module.Signals(signum).name
        state.signal_stop = name
        if state.stop_reason is None:
            state.stop_reason = f"received {name}"
        state.should_stop = True

    # -- an evaluator task beside training -------------------------------------------------------
    def link_evaluator(self) -> None:
        """Listen for an evaluator's stop and mark the run's end in the checkpoint directory.

        A train publisher's core calls it as it begins. It applies where this process saves
        checkpoints (one machine, or the chief) and exactly one attached sink saves them.
        """
        bus, state = self._bus, self._bus._state
        if state.evaluator is not None or (bus.task is not None and not bus.task.is_chief):
            return
        directories = {d for s in bus.sinks if (d := s.checkpoint_directory) is not None}
        if len(directories) == 1:
            state.evaluator = EvaluatorLink(RunRecords(directories.pop()), since=state.wall_start)

    def _mark_ended(self) -> None:
        state = self._bus._state
        link, state.evaluator = state.evaluator, None
        if link is not None:
            try:
                link.records.mark_ended(state.step, self._bus.wall_clock())
            except OSError:  # a full or read-only disk must not mask how the run ended
                logger.exception("could not record the end of the run for an evaluator")

    # -- run scope ---------------------------------------------------------------------------
    def _new_run(self) -> None:
        bus, state = self._bus, self._bus._state
        bus._keys.new_run()
        self.previous_step = state.step if self.runs else None
        self.runs += 1
        state.reset(bus.wall_clock())
        state.start_time = bus.clock()
        for record in bus._subscribers:  # one run each: schedules and error counts start afresh
            record.timer = record.timer.schedule.timer()
            record.errors, record.disabled = 0, False
            record.usage = Usage()
        bus._version += 1  # publishers re-plan against the fresh timers

    def open_implicit(self) -> None:
        """A publisher begins outside ``with bus:``: open a run that closes at interpreter exit,
        at :meth:`close`, or when the bus enters ``with bus:`` — forgetting ``with bus:`` loses
        nothing on a clean end. (No signal handlers: only ``with bus:`` installs them.)"""
        self._new_run()
        self._bus._state.implicit = True
        _implicit_runs.add(self)

    def enter(self) -> None:
        bus, state = self._bus, self._bus._state
        if state.in_run:
            raise RuntimeError("this bus is already running; one `with bus:` at a time")
        if state.implicit:
            self.close()  # the run a publisher opened without `with bus:` ends here
        self._new_run()
        state.in_run = True
        if threading.current_thread() is threading.main_thread():
            handlers: dict[int, Any] = {signum: self._on_stop_signal for signum in bus._stop_signals}
            if signal_module.getsignal(signal_module.SIGINT) is not signal_module.SIG_IGN:  # a background job
                handlers[signal_module.SIGINT] = self._on_sigint
            state.previous_handlers = {signum: signal_module.signal(signum, h) for signum, h in handlers.items()}

    def exit(self, exc: BaseException | None) -> None:
        state = self._bus._state
        try:
            if exc is not None:
                self._bus._dispatcher.publish_exception(exc)
            self.close(raise_errors=exc is None)
        finally:
            for signum, previous in state.previous_handlers.items():
                # None: the previous handler was not installed from Python; the default is the
                # closest that can be restored.
                signal_module.signal(signum, signal_module.SIG_DFL if previous is None else previous)
            state.previous_handlers = {}
            state.in_run = False
            state.owner = None  # no training thread until the next run's first publisher begins
            state.started = False  # the run is over: sinks and functions may be (un)subscribed again
        if state.interrupted and exc is None:
            # The first Ctrl-C stopped the run gracefully: everything is saved and closed; the
            # program is still interrupted, as the user asked (exit status, tracebacks, REPLs).
            raise KeyboardInterrupt("stopped gracefully after Ctrl-C; the final checkpoint and files are written")

    def close(self, *, raise_errors: bool = True) -> None:
        """See :meth:`hookbus.EventBus.close`."""
        self._mark_ended()  # an evaluator waiting for new checkpoints ends too (once)
        state = self._bus._state
        if state.implicit:
            state.implicit = False
            state.started = False  # a later publisher opens a new run
            state.owner = None
            _implicit_runs.discard(self)
        first: BaseException | None = None
        interrupt: BaseException | None = None
        for record in tuple(self._bus._subscribers):  # a sink may detach itself when closed
            sink = record.sink
            if sink is None or id(sink) in state.closed:
                continue
            state.closed.add(id(sink))
            try:
                sink.close()
            except Exception as error:  # close the rest first
                logger.exception("closing %r failed", sink)
                if record.on_error == "raise" and first is None:
                    first = error
            except BaseException as error:  # Ctrl-C during a close: the others still close, then it surfaces
                if interrupt is None:
                    interrupt = error
        if interrupt is not None:
            raise interrupt
        if first is not None and raise_errors:
            raise first


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
