"""A function subscriber on a thread of its own: ``bus.on(..., background=True)``.

A function that waits on the network (a webhook, a chat notifier, a remote dashboard) holds the
training step it is called on for as long as the server takes. Asked to, the bus calls it on a
thread of its own instead: the training thread only hands the event to a
:class:`~hookbus.sink_api.BackgroundWriter` (the writers' queue: bounded, blocking when full,
nothing dropped, in order) whose thread calls the function. What the function does with its
errors follows its ``on_error`` policy, reported on the training thread: an error raised on the
thread is raised again by the subscriber's next call (the dispatcher then isolates, disables or
raises it as for any subscriber) or, if there is none, by the run's close. At the run's close the
queue gets ``close_deadline`` seconds to drain; the events the function has not received by then
are counted as lost (``bus.stats()``, the dashboard's summary) and a
:class:`~hookbus.sink_api.WriterWarning` says how many, never waited for longer.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

from hookbus._contract._stats import WriterStats
from hookbus._writers._writer import BackgroundWriter, WriterWarning

__all__ = ["OffThread"]

_NO_FLUSH_SECS = 3600.0  # a function has nothing to flush; the writer's timer need not wake


class OffThread:
    """The thread, queue and close deadline of one function subscriber, one thread per run.

    Args:
        name: The subscriber's name, in reports and the thread's name.
        fn: The function, called with each event on the thread.
        on_error: Its policy: under ``"isolate"`` the function keeps being called after an
            error; under ``"raise"`` and ``"disable"`` it is not called again in the run (the
            events after its failure are counted lost).
        queue_size: Events that may wait before the training thread blocks.
        close_deadline: Seconds the run's close waits for the queue to drain.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[[Any], object],
        *,
        on_error: str,
        queue_size: int,
        close_deadline: float,
    ) -> None:
        self.name = name
        self.queue_size = queue_size
        self.close_deadline = close_deadline
        self._fn = fn
        self._on_error = on_error
        self._writer: BackgroundWriter[Any] | None = None  # this run's, started by the first event
        self._last: BackgroundWriter[Any] | None = None  # the closed run's: its stats stay readable
        self._failures: deque[Exception] = deque()  # raised on the thread, not yet reported
        self._halted = False  # failed under "raise" or "disable": the function is not called again
        self._skipped = 0  # events the thread passed over once halted

    # -- the training thread -------------------------------------------------------------------
    def deliver(self, payload: Any) -> None:
        """Hand ``payload`` to the thread (the subscriber's handler on the training thread).

        Blocks while the queue is full. Then raises the oldest error the function raised on the
        thread and that was not reported yet (one per call), for the dispatcher's policy.

        Raises:
            WriterStalled: The queue stayed full while the function finished nothing for the
                writers' flush deadline (30 s): the thread is given up, its events counted lost.
        """
        writer = self._writer
        if writer is None:
            writer = self._writer = BackgroundWriter(
                self.name,
                self._call,
                _nothing,
                max_queue_size=self.queue_size,
                flush_secs=_NO_FLUSH_SECS,
                target=f"the events of {self.name}'s own thread",
            )
        writer.put(payload)
        if self._failures:
            raise self._failures.popleft()

    def close(self) -> list[Exception]:
        """End the run's thread within the close deadline (idempotent).

        Warns with :class:`~hookbus.sink_api.WriterWarning` how many events the function did not
        receive by the deadline (they are counted in :meth:`stats`).

        Returns:
            The errors the function raised on the thread that no call reported yet, oldest first.
        """
        writer, self._writer = self._writer, None
        if writer is not None:
            self._last = writer
            lost = writer.close(self.close_deadline, warn=False) + self._skipped
            if lost and not self._halted:
                warnings.warn(
                    f"{self.name}: {lost} event{'s' if lost != 1 else ''} not delivered within the "
                    f"{self.close_deadline:g} s close deadline of its own thread (the function was still "
                    "running: a server that does not answer?); counted as lost in bus.stats()",
                    WriterWarning,
                    stacklevel=2,
                )
        failures = list(self._failures)
        self._failures.clear()
        return failures

    def new_run(self) -> None:
        """A run begins: no thread until its first event, no failures, counts from zero."""
        if self._writer is not None:  # a run that was never closed: end its thread first
            self.close()
        self._last = None
        self._failures.clear()
        self._halted = False
        self._skipped = 0

    def stats(self) -> WriterStats | None:
        """Events given, delivered (the function returned), waiting and lost, and the queue's size;
        ``None`` before the run's first event."""
        writer = self._writer or self._last
        if writer is None:
            return None
        counts = writer.stats()
        skipped = self._skipped  # passed over, not delivered: lost, whatever the writer says
        return dataclasses.replace(counts, written=(counts.written or 0) - skipped, lost=counts.lost + skipped)

    # -- its own thread ------------------------------------------------------------------------
    def _call(self, payload: Any) -> None:
        if self._halted:
            self._skipped += 1
            return
        try:
            self._fn(payload)
        except Exception as error:  # reported on the training thread (deliver, close)
            step = getattr(payload, "step", None)
            error.add_note(
                f"raised on the own thread of subscriber {self.name!r}"
                + (f" while handling the event of step {step}" if step is not None else "")
            )
            if self._on_error != "isolate":
                self._halted = True
            self._failures.append(error)


def _nothing() -> None:
    """A function subscriber's writer has nothing to flush."""
