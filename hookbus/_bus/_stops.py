"""One home for stopping: every stop request of a run, wherever it comes from, and the answer.

A stop is asked for by a subscriber (``event.request_stop``), a user (``bus.request_stop``), a
signal (SIGTERM, a first Ctrl-C), another thread (a watchdog), an evaluator task (through its
records), another worker (the parameter server's flag, :class:`hookbus._tf.hook._shared_stop.SharedStop`, or
the collective agreement, :class:`hookbus._tf._collective.CollectiveStop`). Each becomes one
:class:`~hookbus.sink_api.StopRequest` with its reason, source and step, published as ``stop_requested``
once the current event has reached every subscriber. The first reason of the run is kept.

Thread-aware: a request from a signal handler or another thread is only recorded (the flag is
set at once, so the training loop sees it); the training thread turns it into a request at its
next step, in :meth:`Stops.poll`, which the publishers' core calls after every step. The
publishing itself belongs to the dispatcher: :class:`Stops` is given a ``deliver`` callback
that publishes what is pending once no event is being dispatched.
"""

from __future__ import annotations

import math
import signal as signal_module
import threading
import time
from collections.abc import Callable

from hookbus._contract._events import StopRequest

__all__ = ["Stops"]

#: A source of stops polled on the training thread: ``(reason, source)`` when it asks, else ``None``.
Watcher = Callable[[], "tuple[str, str] | None"]


class Stops:
    """Whether this run stops, why, and the requests waiting to be published.

    Args:
        step: The run's current step (a request's default step).
        wall_clock: Stamps each request (``StopRequest.wall_time``).
        who: The subscriber being called, if any (a request's default source; ``"user"`` else).
        deliver: Publishes the pending requests when no event is being dispatched (else the
            dispatch in progress does, once it has reached every subscriber).
        clock: The monotonic clock that paces the watchers (the bus's; default
            :func:`time.monotonic`).

    Attributes:
        requested: Whether a stop was requested in this run (set at once, from any thread).
        reason: The first reason of the run, or ``None``.
        owner: The training thread (``threading.get_ident()``) once a publisher began, else ``None``.
        watch_at: When, on the clock, :meth:`poll` polls the watchers next (``inf`` without
            watchers; read-only outside): a publisher's quiet step, which does not poll, checks the
            clock against it before the step (:meth:`hookbus.publisher_api.PublisherCore.quiet`), and
            :meth:`hookbus.publisher_api.PublisherCore.should_stop` before it polls.
    """

    def __init__(
        self,
        *,
        step: Callable[[], int],
        wall_clock: Callable[[], float],
        who: Callable[[], str | None],
        deliver: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._step = step
        self._wall_clock = wall_clock
        self._who = who
        self._deliver = deliver
        self._clock = clock
        self._watchers: list[Watcher] = []
        self._watch_every = math.inf  # the shortest pause any watcher asked for between polls
        self.reset()

    def reset(self) -> None:
        """A new run: nothing requested."""
        self.requested = False
        self.reason: str | None = None
        self.owner: int | None = None
        self._pending: list[StopRequest] = []
        self._recorded: list[tuple[str, str]] = []  # off the training thread, for its next step
        self._signal: str | None = None
        self.watch_at = -math.inf if self._watchers else math.inf  # when the watchers are polled next

    # -- asking --------------------------------------------------------------------------------
    def request(self, reason: str, *, step: int | None = None, source: str | None = None) -> None:
        """Stop at the end of the current step (see :meth:`hookbus.EventBus.request_stop`).

        On the training thread the request is queued and published once the current event
        has reached every subscriber; from another thread it is only recorded, and the
        training thread publishes it at its next step.

        Raises:
            ValueError: if ``reason`` is not a non-empty string.
        """
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"reason must be a non-empty string (got {reason!r})")
        if self.owner is not None and threading.get_ident() != self.owner:
            # Another thread (a watchdog, a UI): record only. The training thread publishes the
            # request and acts on it at its next step, where the final checkpoint is saved at
            # a step that is no longer moving (list.append is atomic; the flag is read per step).
            self._keep(reason)
            self._recorded.append((reason, source or f"thread {threading.current_thread().name}"))
            return
        if source is None:
            source = self._who() or "user"
        self._keep(reason)
        self._pending.append(StopRequest(reason, source, self._step() if step is None else step, self._wall_clock()))
        self._deliver()

    def from_signal(self, signum: int) -> None:
        """A stop signal arrived (in its handler, between bytecodes on the main thread): record it.

        The reason is kept now, so a signal that ends the run before any step (during begin)
        still says why (a requeue script reads ``bus.stop_reason``).
        """
        name = signal_module.Signals(signum).name
        self._signal = name
        self._keep(f"received {name}")

    def watch(self, watcher: Watcher, every_secs: float = 0.0) -> None:
        """Poll ``watcher`` at the steps of every run, at most once per ``every_secs`` of the clock
        (default 0: every step); an evaluator task's records are read once a second."""
        self._watchers.append(watcher)
        self._watch_every = min(self._watch_every, every_secs)
        self.watch_at = -math.inf

    def _keep(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.requested = True

    # -- acting, on the training thread ------------------------------------------------------------
    def poll(self, before: Callable[[], object] | None = None) -> None:
        """Turn a signal, another thread's stop or a watcher's into a request here.

        ``before`` runs once before the first of them is requested (a publisher that estimated
        the step reads it there, so the stop and its checkpoint carry the exact step).
        """
        found: list[tuple[str, str]] = []
        if self._signal is not None:
            name, self._signal = self._signal, None
            found.append((f"received {name}", "signal"))
        while self._recorded:
            found.append(self._recorded.pop(0))
        if self._watchers:
            now = self._clock()
            if now >= self.watch_at:
                self.watch_at = now + self._watch_every
                for watcher in self._watchers:
                    asked = watcher()
                    if asked is not None:
                        found.append(asked)
        if found and before is not None:
            before()
        for reason, source in found:
            self.request(reason, source=source)

    # -- what the dispatcher publishes -----------------------------------------------------------------
    @property
    def pending(self) -> bool:
        """Whether requests wait to be published."""
        return bool(self._pending)

    def next_pending(self) -> StopRequest:
        """The oldest request waiting to be published (removed)."""
        return self._pending.pop(0)

    def drop_pending(self) -> None:
        """A dispatch failed: the requests it made are not published (the run is ending)."""
        self._pending.clear()
