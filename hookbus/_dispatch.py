"""Ordered, isolated delivery of one event to the subscribers, and stop requests.

The mechanics under :class:`hookbus.EventBus`: subscribers run in order; a failure is handled by
the failing subscriber's ``on_error`` policy without keeping the event from the others; stop
requests and deferred work (a checkpoint's save) wait until the event has reached everyone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import blinker

from hookbus._events import ExceptionRaised, StopRequest, SubscriberError
from hookbus._subscriber import Subscriber

__all__ = ["Dispatcher"]

logger = logging.getLogger("hookbus")


class Dispatcher:
    """Delivery state and logic; :class:`hookbus.EventBus` initialises the attributes."""

    signals: dict[str, blinker.NamedSignal]
    wall_clock: Callable[[], float]
    step: int
    should_stop: bool
    stop_reason: str | None
    _subscribers: list[Subscriber]
    _here: list[Subscriber]
    _depth: int
    _pending_stops: list[StopRequest]
    _deferred: list[Callable[[], None]]
    _current: Subscriber | None
    _owner: int | None
    _foreign_stops: list[tuple[str, str]]

    # -- dispatch ----------------------------------------------------------------------------
    def publish(self, signal: str, payload: Any, subscribers: Iterable[Subscriber] | None = None) -> None:
        """Deliver ``payload`` to ``subscribers`` (default: all with a handler), then to raw receivers.

        Subscribers run in order; each failure is handled by that subscriber's ``on_error``
        policy without keeping the event from the others. A ``"raise"`` failure is re-raised
        once every subscriber has had the event.
        """
        # A snapshot: a handler may disconnect itself (or another) while the event is delivered.
        targets = tuple(self._here) if subscribers is None else subscribers
        first_error: BaseException | None = None
        self._depth += 1
        try:
            for record in targets:
                handler = record.handlers.get(signal)
                if handler is None or record.disabled:
                    continue
                previous, self._current = self._current, record
                try:
                    handler(payload)
                except Exception as error:  # policy decides; KeyboardInterrupt passes
                    if self._report(record, signal, payload, error) and first_error is None:
                        first_error = error
                finally:
                    self._current = previous
            raw = self.signals[signal]
            if raw.receivers:
                raw.send(self, event=payload)
        finally:
            self._depth -= 1
        if first_error is not None:
            self._pending_stops.clear()
            self._deferred.clear()
            raise first_error
        if self._depth == 0:
            self._drain()

    def _report(self, record: Subscriber, signal: str, payload: Any, error: Exception) -> bool:
        """Apply ``record``'s error policy; True if the error must propagate."""
        record.errors += 1
        if signal == "begin":
            # Before step 1 a failure is bad configuration or an unusable environment (a foreign
            # file, an unwritable directory): fail the run now whatever the policy, rather than
            # train for days with a sink that silently does nothing.
            return True
        if record.on_error == "disable":
            record.disabled = True
        if record.on_error != "raise" and (record.errors == 1 or record.on_error == "disable"):
            logger.error(
                "subscriber %r raised while handling %r (on_error=%r%s)",
                record.name,
                signal,
                record.on_error,
                "; it is disabled" if record.on_error == "disable" else "; further errors are counted",
                exc_info=error,
            )
        if signal not in ("subscriber_error", "exception"):
            self.announce_error(record, signal, getattr(payload, "step", self.step), error)
        return record.on_error == "raise"

    def announce_error(self, record: Subscriber, signal: str, step: int, error: BaseException) -> None:
        """Publish ``subscriber_error`` for ``record``'s failure to every other subscriber."""
        report = SubscriberError(record.name, signal, step, error, record.errors, record.on_error)
        self._depth += 1
        try:
            for other in tuple(self._here):
                handler = other.handlers.get("subscriber_error")
                if handler is not None and not other.disabled and other is not record:
                    self._call_quietly(other, "subscriber_error", handler, report)
            if self.signals["subscriber_error"].receivers:
                self.signals["subscriber_error"].send(self, event=report)
        finally:
            self._depth -= 1

    def _call_quietly(self, record: Subscriber, signal: str, handler: Callable[[Any], None], payload: Any) -> None:
        try:
            handler(payload)
        except Exception:  # a failing error/exception handler must not mask the first
            record.errors += 1
            logger.exception("subscriber %r raised while handling %r", record.name, signal)

    def call_after_dispatch(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the event being dispatched has reached every subscriber.

        A checkpoint sink runs early (priority) but must save only after the writers have
        received the step; it defers its save with this. Outside a dispatch, ``fn`` runs now.
        """
        if self._depth == 0:
            fn()
        else:
            self._deferred.append(fn)

    def _drain(self) -> None:
        while self._pending_stops or self._deferred:
            if self._pending_stops:
                request = self._pending_stops.pop(0)
                self.publish("stop_requested", request)
            else:
                self._deferred.pop(0)()

    def request_stop(self, reason: str, *, step: int | None = None, source: str | None = None) -> None:
        """Stop training at the end of the current step.

        The first reason of the run is kept in :attr:`stop_reason`; every request is
        published as ``stop_requested`` once the current event has reached every subscriber.
        From a thread other than the training thread the request is only recorded: the
        training thread publishes it and stops at its next step.
        """
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"reason must be a non-empty string (got {reason!r})")
        if self._owner is not None and threading.get_ident() != self._owner:
            # Another thread (a watchdog, a UI): record only. The training thread publishes the
            # request and acts on it at its next step, where the final checkpoint is saved at
            # a step that is no longer moving (list.append is atomic; the flag is read per step).
            if self.stop_reason is None:
                self.stop_reason = reason
            self._foreign_stops.append((reason, source or f"thread {threading.current_thread().name}"))
            self.should_stop = True
            return
        if source is None:
            source = self._current.name if self._current is not None else "user"
        request = StopRequest(reason, source, self.step if step is None else step, self.wall_clock())
        if self.stop_reason is None:
            self.stop_reason = reason
        self.should_stop = True
        self._pending_stops.append(request)
        if self._depth == 0:
            self._drain()

    def publish_exception(self, error: BaseException) -> None:
        """Publish ``exception`` to every subscriber; their failures are logged, never raised."""
        payload = ExceptionRaised(error, self.step)
        for record in tuple(self._here):
            handler = record.handlers.get("exception")
            if handler is not None:
                self._call_quietly(record, "exception", handler, payload)
        if self.signals["exception"].receivers:
            try:
                self.signals["exception"].send(self, event=payload)
            except Exception:  # must not mask the training error
                logger.exception("a raw receiver of 'exception' raised")
