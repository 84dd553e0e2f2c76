"""Ordered, isolated delivery of one event to the subscribers, and stop requests.

A part of :class:`hookbus.EventBus`: subscribers run in order; a failure is handled by the
failing subscriber's ``on_error`` policy without keeping the event from the others; stop
requests and deferred work (a checkpoint's save) wait until the event has reached everyone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import TYPE_CHECKING, Any

from hookbus._events import ExceptionRaised, StopRequest, SubscriberError
from hookbus._subscription import Subscriber

if TYPE_CHECKING:
    from hookbus._bus import EventBus

__all__ = ["Dispatcher"]

logger = logging.getLogger("hookbus")


class Dispatcher:
    """Delivers events for ``bus`` (its subscribers here, its signals, its run state)."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus

    # -- dispatch ----------------------------------------------------------------------------
    def publish(self, signal: str, payload: Any, subscribers: Iterable[Subscriber] | None = None) -> None:
        """Deliver ``payload`` to ``subscribers`` (default: all with a handler), then to raw receivers.

        Subscribers run in order; each failure is handled by that subscriber's ``on_error``
        policy without keeping the event from the others. A ``"raise"`` failure is re-raised
        once every subscriber has had the event.
        """
        bus, state = self._bus, self._bus._state
        # A snapshot: a handler may disconnect itself (or another) while the event is delivered.
        targets = tuple(bus._here) if subscribers is None else subscribers
        first_error: BaseException | None = None
        step_signal = signal == "after_run"
        if step_signal:
            state.due_steps += 1
        state.depth += 1
        # Timed only here, on dispatches: a quiet step never reaches this loop. One clock read
        # per call: each handler's time runs from the previous reading to the one after it.
        clock = perf_counter()
        try:
            for record in targets:
                handler = record.handlers.get(signal)
                if handler is None or record.disabled:
                    continue
                previous, state.current = state.current, record
                try:
                    handler(payload)
                except Exception as error:  # policy decides; KeyboardInterrupt passes
                    if self._report(record, signal, payload, error) and first_error is None:
                        first_error = error
                finally:
                    state.current = previous
                    now = perf_counter()
                    spent, clock = now - clock, now
                    usage = record.usage
                    if step_signal:
                        usage.step_calls += 1
                        usage.step_seconds += spent
                    else:
                        usage.other_calls += 1
                        usage.other_seconds += spent
                    if spent > usage.max_seconds:
                        usage.max_seconds = spent
            raw = bus.signals[signal]
            if raw.receivers:
                raw.send(bus, event=payload)
        finally:
            state.depth -= 1
        if first_error is not None:
            state.pending_stops.clear()
            state.deferred.clear()
            raise first_error
        if state.depth == 0:
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
            self.announce_error(record, signal, getattr(payload, "step", self._bus._state.step), error)
        return record.on_error == "raise"

    def announce_error(self, record: Subscriber, signal: str, step: int, error: BaseException) -> None:
        """Publish ``subscriber_error`` for ``record``'s failure to every other subscriber."""
        bus, state = self._bus, self._bus._state
        report = SubscriberError(record.name, signal, step, error, record.errors, record.on_error)
        state.depth += 1
        try:
            for other in tuple(bus._here):
                handler = other.handlers.get("subscriber_error")
                if handler is not None and not other.disabled and other is not record:
                    self._call_quietly(other, "subscriber_error", handler, report)
            if bus.signals["subscriber_error"].receivers:
                bus.signals["subscriber_error"].send(bus, event=report)
        finally:
            state.depth -= 1

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
        state = self._bus._state
        if state.depth == 0:
            fn()
            return
        record = state.current
        if record is None:
            state.deferred.append(fn)
            return

        def timed() -> None:  # the deferred work (a checkpoint's save) is its subscriber's cost
            started = perf_counter()
            try:
                fn()
            finally:
                record.usage.add_deferred(perf_counter() - started)

        state.deferred.append(timed)

    def hold(self) -> None:
        """Keep stop requests and deferred work (a checkpoint's save) waiting until :meth:`release`.

        For a step whose events span several publications with the framework's own work between
        them (a Keras batch, then its epoch's validation and epoch record): a save at that step
        then runs after all of them, so its barrier covers every event of the step.
        """
        self._bus._state.depth += 1

    def release(self) -> None:
        """End a :meth:`hold`: what waited runs now, in order (unless another dispatch is in progress)."""
        state = self._bus._state
        if state.depth > 0:
            state.depth -= 1
        if state.depth == 0:
            self._drain()

    def _drain(self) -> None:
        state = self._bus._state
        while state.pending_stops or state.deferred:
            if state.pending_stops:
                request = state.pending_stops.pop(0)
                self.publish("stop_requested", request)
            else:
                deferred = state.deferred.pop(0)
                state.depth += 1  # what deferred work defers runs after the work deferred before it
                try:
                    deferred()
                finally:
                    state.depth -= 1

    def request_stop(self, reason: str, *, step: int | None = None, source: str | None = None) -> None:
        """See :meth:`hookbus.EventBus.request_stop`."""
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"reason must be a non-empty string (got {reason!r})")
        state = self._bus._state
        if state.owner is not None and threading.get_ident() != state.owner:
            # Another thread (a watchdog, a UI): record only. The training thread publishes the
            # request and acts on it at its next step, where the final checkpoint is saved at
            # a step that is no longer moving (list.append is atomic; the flag is read per step).
            if state.stop_reason is None:
                state.stop_reason = reason
            state.foreign_stops.append((reason, source or f"thread {threading.current_thread().name}"))
            state.should_stop = True
            return
        if source is None:
            source = state.current.name if state.current is not None else "user"
        request = StopRequest(reason, source, state.step if step is None else step, self._bus.wall_clock())
        if state.stop_reason is None:
            state.stop_reason = reason
        state.should_stop = True
        state.pending_stops.append(request)
        if state.depth == 0:
            self._drain()

    def publish_exception(self, error: BaseException) -> None:
        """Publish ``exception`` to every subscriber; their failures are logged, never raised."""
        bus = self._bus
        payload = ExceptionRaised(error, bus._state.step)
        for record in tuple(bus._here):
            handler = record.handlers.get("exception")
            if handler is not None:
                self._call_quietly(record, "exception", handler, payload)
        if bus.signals["exception"].receivers:
            try:
                bus.signals["exception"].send(bus, event=payload)
            except Exception:  # must not mask the training error
                logger.exception("a raw receiver of 'exception' raised")
