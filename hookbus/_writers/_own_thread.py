"""A writer that has a thread of its own (TensorBoard's ``EventFileWriter``), under hookbus's deadlines.

Such a writer queues and writes on its own thread already: stacking a :class:`BackgroundWriter`
on it would add a second queue. What it lacks are deadlines: its ``flush`` and its ``close`` join
its thread with no timeout, and handing it an item blocks on a full queue with no timeout, so a
stalled disk would hang training, the checkpoint barrier and the end of the run.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

from hookbus._contract._stats import WriterStats
from hookbus._rules._validate import flag, positive_int, seconds
from hookbus._writers._deadline import DEFAULT_FLUSH_DEADLINE, FlushDeadline
from hookbus._writers._writer import WriterWarning

__all__ = ["OwnThreadWriter"]


class OwnThreadWriter:
    """Runs a writer with a thread of its own within the flush and close deadlines.

    The same contract as :class:`hookbus.sink_api.BackgroundWriter`, for a writer that brings its thread:

    - :meth:`add` hands it an item, flushing first when ``capacity`` items are outstanding since
      its last completed flush, so that its own queue (of that size) never fills and blocks;
    - :meth:`flush` runs its blocking flush on a helper thread within ``flush_deadline``
      (:meth:`hookbus.sink_api.FlushDeadline.run`): past it :class:`hookbus.sink_api.WriterStalled` is raised and the
      writer is given up, later calls failing at once;
    - :meth:`run` does the same for any other blocking call (opening a file that writes a header);
    - :meth:`close` closes it on a helper thread and waits at most its deadline, warning with
      :class:`hookbus.sink_api.WriterWarning` past it (and not waiting at all after a stall);
    - :meth:`stats` counts the rows handed to it (its queue keeps its depth to itself).

    Args:
        name: The writer's name (the sink's), first in every report.
        flush: Flushes the writer (or all of a sink's writers); blocking.
        close: Closes them; blocking. What it raises is raised by :meth:`close`.
        capacity: Items the writer's own queue holds (the ``max_queue_size`` it was made with).
        flush_deadline: Seconds a flush may take (default 30.0).
        target: What the writer writes, for reports (e.g. ``"the event files in '/logs'"``).
        unit: What one item is called in reports (default ``"events"``).
    """

    def __init__(
        self,
        name: str,
        flush: Callable[[], None],
        close: Callable[[], None],
        *,
        capacity: int,
        flush_deadline: float = DEFAULT_FLUSH_DEADLINE,
        target: str,
        unit: str = "events",
    ) -> None:
        self.name, self.target, self.unit = name, target, unit
        self.capacity = positive_int("capacity", capacity)
        self.deadline = FlushDeadline(name, seconds("flush_deadline", flush_deadline), target)
        self._flush, self._close = flush, close
        self.rows = 0  # items added as rows: what stats() reports
        self._handed = 0  # every item added
        self._flushed = 0  # of those, the items the last completed flush wrote
        self._closed = False

    def add(self, put: Callable[[], None], *, row: bool = True) -> None:
        """Hand one item over by calling ``put`` (e.g. ``lambda: writer.add_event(proto)``).

        Args:
            put: Gives the item to the writer.
            row: Whether the item counts as a row in :meth:`stats` (default ``True``; markers and
                headers do not).

        Raises:
            WriterStalled: The flush made first to keep the queue from filling missed its deadline.
        """
        counted = flag("row", row)
        if self._handed - self._flushed >= self.capacity:
            self.flush()
        put()
        self._handed += 1
        if counted:
            self.rows += 1

    def run(self, call: Callable[[], None], unwritten: str) -> None:
        """Run a blocking ``call`` within the flush deadline; ``unwritten`` ends the stall's report."""
        self.deadline.run(call, lambda: unwritten)

    def flush(self) -> None:
        """Block until every item added so far is written, within the flush deadline."""
        handed = self._handed

        def flush() -> None:
            self._flush()
            self._flushed = handed

        def unwritten() -> str:
            rows = handed - self._flushed
            return f"{rows} {self.unit} handed to it since its last completed flush may not be written"

        self.deadline.run(flush, unwritten)

    def close(self, deadline: float = 10.0) -> None:
        """Close the writer, waiting at most ``deadline`` seconds (idempotent).

        Past the deadline it warns (:class:`hookbus.sink_api.WriterWarning`) and leaves the writer to its
        helper thread, a daemon; after a stall it does not wait at all (the stall was reported).
        """
        seconds("deadline", deadline)
        if self._closed:
            return
        self._closed = True
        failed: list[BaseException] = []

        def close() -> None:
            try:
                self._close()
            except BaseException as error:  # raised on the closing thread below
                failed.append(error)

        closer = threading.Thread(target=close, name=f"{self.name} close", daemon=True)
        closer.start()
        if self.deadline.stalled:
            return  # it closes if the disk comes back, unwaited for
        closer.join(deadline)
        if closer.is_alive():
            warnings.warn(
                f"{self.name}: {self.target} did not close within {deadline:g} s (a stalled disk?); "
                f"{self.unit} not yet written may be lost",
                WriterWarning,
                stacklevel=2,
            )
        elif failed:
            raise failed[0]

    def stats(self) -> WriterStats:
        """Rows added; ``written`` and ``queued`` are ``None`` (the writer does not say)."""
        return WriterStats(self.rows, None, None, self.capacity, stalled=self.deadline.report)
