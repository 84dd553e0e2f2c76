"""The run scope of a bus: ``with bus:``, SIGTERM as a stop request, closing every sink once."""

from __future__ import annotations

import logging
import signal as signal_module
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from hookbus._subscriber import Subscriber

if TYPE_CHECKING:
    from types import FrameType, TracebackType

__all__ = ["RunScope"]

logger = logging.getLogger("hookbus")
_RunT = TypeVar("_RunT", bound="RunScope")


class RunScope:
    """``with bus:`` and signals; :class:`hookbus.EventBus` initialises the attributes."""

    clock: Callable[[], float]
    version: int
    should_stop: bool
    started: bool
    _subscribers: list[Subscriber]
    _signal_stop: str | None
    _foreign_stops: list[tuple[str, str]]
    _owner: int | None
    _run_wall_start: float
    wall_clock: Callable[[], float]
    _start_time: float | None
    _closed: set[int]
    _previous_handler: Any
    _handler_installed: bool
    _in_run: bool

    if TYPE_CHECKING:  # provided by EventBus and Dispatcher; declared here for type checkers only

        def _reset_run(self) -> None: ...

        def request_stop(self, reason: str, *, step: int | None = None, source: str | None = None) -> None: ...

        def publish_exception(self, error: BaseException) -> None: ...

        def _poll_evaluator(self) -> None: ...

        def _mark_ended(self) -> None: ...

    # -- signals (SIGTERM) -------------------------------------------------------------------
    def poll_signals(self) -> None:
        """Turn a signal, or a stop another thread recorded, into a stop request here.

        Publishers call it on the training thread after every training step and at the end.
        """
        if self._signal_stop is not None:
            name, self._signal_stop = self._signal_stop, None
            self.request_stop(f"received {name}", source="signal")
        while self._foreign_stops:
            reason, source = self._foreign_stops.pop(0)
            self.request_stop(reason, source=source)
        self._poll_evaluator()

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # Runs between bytecodes on the main thread: only set a flag, the publisher acts on it.
        self._signal_stop = signal_module.Signals(signum).name
        self.should_stop = True

    # -- run scope ---------------------------------------------------------------------------
    def __enter__(self: _RunT) -> _RunT:
        if self._in_run:
            raise RuntimeError("this bus is already running; one `with bus:` at a time")
        self._reset_run()
        self._in_run = True
        self._start_time = self.clock()
        self._run_wall_start = self.wall_clock()
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal_module.signal(signal_module.SIGTERM, self._on_sigterm)
            self._handler_installed = True
        for record in self._subscribers:  # one run each: schedules and error counts start afresh
            record.timer = record.timer.schedule.timer()
            record.errors, record.disabled = 0, False
        self.version += 1  # publishers re-plan against the fresh timers
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None:
                self.publish_exception(exc)
            self.close(raise_errors=exc is None)
        finally:
            if self._handler_installed:
                # None: the previous handler was not installed from Python; the default is the
                # closest that can be restored.
                previous = self._previous_handler
                signal_module.signal(signal_module.SIGTERM, signal_module.SIG_DFL if previous is None else previous)
                self._previous_handler, self._handler_installed = None, False
            self._in_run = False
            self._owner = None  # no training thread until the next run's first publisher begins
            self.started = False  # the run is over: sinks and functions may be (un)subscribed again

    def close(self, *, raise_errors: bool = True) -> None:
        """Close every attached sink exactly once (idempotent).

        Every sink is closed even if another's ``close`` raises; afterwards the first error of a
        sink whose policy is ``"raise"`` is re-raised when ``raise_errors``.
        """
        self._mark_ended()  # an evaluator waiting for new checkpoints ends too (once)
        first: BaseException | None = None
        for record in tuple(self._subscribers):  # a sink may detach itself when closed
            sink = record.sink
            if sink is None or id(sink) in self._closed:
                continue
            self._closed.add(id(sink))
            try:
                sink.close()
            except Exception as error:  # close the rest first
                logger.exception("closing %r failed", sink)
                if record.on_error == "raise" and first is None:
                    first = error
        if first is not None and raise_errors:
            raise first
