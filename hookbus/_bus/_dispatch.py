"""Ordered, isolated delivery of one event to the subscribers.

A part of :class:`hookbus.EventBus`: subscribers run in order; a failure is handled by the
failing subscriber's ``on_error`` policy without keeping the event from the others; stop
requests (:class:`hookbus._bus._stops.Stops`) and deferred work (a checkpoint's save) wait until the
event has reached everyone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from time import perf_counter
from typing import TYPE_CHECKING, Any

from hookbus._contract._events import ExceptionRaised, SubscriberError

if TYPE_CHECKING:
    import blinker

    from hookbus._bus._roster import Roster
    from hookbus._bus._state import RunState
    from hookbus._bus._stops import Stops
    from hookbus._bus._subscription import Subscriber

__all__ = ["Dispatcher"]

logger = logging.getLogger("hookbus")


class Dispatcher:
    """Delivers events to the subscribers here on ``roster``, then to raw blinker receivers.

    Args:
        roster: Who is subscribed (its ``here``: those that run on this task).
        stops: The run's stops; their pending requests are published once an event has
            reached every subscriber.
        state: The run's progress (the step a failure is reported at).
        signals: The raw signals by name (``bus.after_run`` ...), sent after the subscribers.
        sender: What raw receivers get as the sender (the bus).

    Attributes:
        depth: Nesting of dispatches in progress (0: none).
        current: The subscriber being called, if any.
        due_steps: ``after_run`` events published in this run (what ``bus.stats()`` divides by).
        step_began: When the last ``after_run`` dispatch began (:func:`time.perf_counter`).
        step_ended: When its last subscriber returned: with :attr:`step_began`, the readings a
            publisher's :class:`~hookbus.publisher_api.Throughput` takes instead of its own.
    """

    def __init__(
        self,
        roster: Roster,
        stops: Stops,
        state: RunState,
        signals: Mapping[str, blinker.NamedSignal],
        sender: object,
    ) -> None:
        self._roster = roster
        self._stops = stops
        self._state = state
        self._signals = signals
        self._sender = sender
        self.reset()

    def reset(self) -> None:
        """A new run: nothing in progress, nothing deferred, no step published."""
        self.depth = 0
        self.current: Subscriber | None = None
        self.due_steps = 0
        self.step_began = self.step_ended = 0.0
        self._deferred: list[Callable[[], None]] = []

    def current_name(self) -> str | None:
        """The name of the subscriber being called (the default source of its stop request)."""
        current = self.current
        return None if current is None else current.name

    def settle(self) -> None:
        """Publish what waits (stop requests, deferred work) unless an event is being dispatched."""
        if self.depth == 0:
            self._drain()

    # -- dispatch ----------------------------------------------------------------------------
    def publish(self, signal: str, payload: Any, subscribers: Iterable[Subscriber] | None = None) -> None:
        """Deliver ``payload`` to ``subscribers`` (default: all with a handler), then to raw receivers.

        Subscribers run in order; each failure is handled by that subscriber's ``on_error``
        policy without keeping the event from the others. A ``"raise"`` failure is re-raised
        once every subscriber has had the event.
        """
        # A snapshot: a handler may disconnect itself (or another) while the event is delivered.
        targets = tuple(self._roster.here) if subscribers is None else subscribers
        first_error: BaseException | None = None
        step_signal = signal == "after_run"
        if step_signal:
            self.due_steps += 1
        self.depth += 1
        # Timed only here, on dispatches: a quiet step never reaches this loop. One clock read
        # per call: each handler's time runs from the previous reading to the one after it.
        began = clock = perf_counter()
        try:
            for record in targets:
                handler = record.handlers.get(signal)
                if handler is None or record.disabled:
                    continue
                previous, self.current = self.current, record
                try:
                    handler(payload)
                except Exception as error:  # policy decides; KeyboardInterrupt passes
                    if self._apply_error_policy(record, signal, payload, error) and first_error is None:
                        first_error = error
                finally:
                    self.current = previous
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
            if step_signal:  # the step's subscribers, start to end: the publisher's time outside
                self.step_began, self.step_ended = began, clock
            raw = self._signals[signal]
            if raw.receivers:
                raw.send(self._sender, event=payload)
        finally:
            self.depth -= 1
        if first_error is not None:
            self._stops.drop_pending()
            self._deferred.clear()
            raise first_error
        if self.depth == 0 and (self._deferred or self._stops.pending):  # the usual due step: nothing waits
            self._drain()

    def _apply_error_policy(self, record: Subscriber, signal: str, payload: Any, error: Exception) -> bool:
        """Apply ``record``'s error policy; True if the error must propagate."""
        if signal == "begin":
            # Before step 1 a failure is bad configuration or an unusable environment (a foreign
            # file, an unwritable directory): fail the run now whatever the policy, rather than
            # train for days with a sink that silently does nothing.
            record.failed(disable=False)
            return True
        record.failed(disable=record.on_error == "disable")
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
            self.announce_error(record, signal, getattr(payload, "step", self._state.step), error)
        return record.on_error == "raise"

    def announce_error(self, record: Subscriber, signal: str, step: int, error: BaseException) -> None:
        """Publish ``subscriber_error`` for ``record``'s failure to every other subscriber."""
        report = SubscriberError(record.name, signal, step, error, record.errors, record.on_error)
        self.depth += 1
        try:
            for other in tuple(self._roster.here):
                handler = other.handlers.get("subscriber_error")
                if handler is not None and not other.disabled and other is not record:
                    self._call_quietly(other, "subscriber_error", handler, report)
            raw = self._signals["subscriber_error"]
            if raw.receivers:
                raw.send(self._sender, event=report)
        finally:
            self.depth -= 1

    def _call_quietly(self, record: Subscriber, signal: str, handler: Callable[[Any], None], payload: Any) -> None:
        try:
            handler(payload)
        except Exception:  # a failing error/exception handler must not mask the first
            record.failed(disable=False)
            logger.exception("subscriber %r raised while handling %r", record.name, signal)

    def call_after_dispatch(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the event being dispatched has reached every subscriber.

        A checkpoint sink runs early (priority) but must save only after the writers have
        received the step; it defers its save with this. Outside a dispatch, ``fn`` runs now.
        """
        if self.depth == 0:
            fn()
            return
        record = self.current
        if record is None:
            self._deferred.append(fn)
            return

        def timed() -> None:  # the deferred work (a checkpoint's save) is its subscriber's cost
            started = perf_counter()
            try:
                fn()
            finally:
                record.usage.add_deferred(perf_counter() - started)

        self._deferred.append(timed)

    def hold(self) -> None:
        """Keep stop requests and deferred work (a checkpoint's save) waiting until :meth:`release`.

        For a step whose events span several publications with the framework's own work between
        them (a Keras batch, then its epoch's validation and epoch record): a save at that step
        then runs after all of them, so its barrier covers every event of the step.
        """
        self.depth += 1

    def release(self) -> None:
        """End a :meth:`hold`: what waited runs now, in order (unless another dispatch is in progress)."""
        if self.depth > 0:
            self.depth -= 1
        if self.depth == 0:
            self._drain()

    def _drain(self) -> None:
        stops, deferred = self._stops, self._deferred
        while stops.pending or deferred:
            if stops.pending:
                self.publish("stop_requested", stops.next_pending())
            else:
                work = deferred.pop(0)
                self.depth += 1  # what deferred work defers runs after the work deferred before it
                try:
                    work()
                finally:
                    self.depth -= 1

    def publish_exception(self, error: BaseException) -> None:
        """Publish ``exception`` to every subscriber; their failures are logged, never raised."""
        payload = ExceptionRaised(error, self._state.step)
        for record in tuple(self._roster.here):
            handler = record.handlers.get("exception")
            if handler is not None:
                self._call_quietly(record, "exception", handler, payload)
        raw = self._signals["exception"]
        if raw.receivers:
            try:
                raw.send(self._sender, event=payload)
            except Exception:  # must not mask the training error
                logger.exception("a raw receiver of 'exception' raised")
