"""A background writer: a thread behind a bounded queue that blocks when full and never drops.

Sinks that write files (CSV) hand rows to a :class:`BackgroundWriter` so that the training thread
only enqueues. The contract, which the checkpoint barrier relies on:

- :meth:`BackgroundWriter.put` blocks while the queue is full (training slows down only if the
  disk cannot keep up on average); nothing is dropped.
- The thread flushes every ``flush_secs`` while it has unflushed writes.
- :meth:`BackgroundWriter.flush` returns once everything enqueued before it is written and
  flushed to the OS.
- :meth:`BackgroundWriter.close` drains within a deadline; what it could not write is reported
  with a :class:`WriterWarning` naming the writer and the count of rows lost, and counted in its
  stats (``WriterStats.lost``), as are the rows a failed writer did not write.
- Every flush has a deadline too (:class:`FlushDeadline`, shared by every writer, also those
  with a thread of their own such as TensorBoard's): a flush that does not return in time, or a
  ``put`` that waits that long on a full queue the thread no longer empties, raises
  :class:`WriterStalled` naming the writer, its path and what it could not write. The writer is
  then given up: later calls fail at once and ``close`` gives the thread no more time.
- An exception in the thread is never swallowed: the next ``put``, ``call``, ``flush`` or
  ``close`` raises :class:`WriterError` from it, with the exact count of rows not written: every
  row given to ``put`` (also those refused after the failure) less those that reached the file,
  as the sink counts them (``landed``: a failed flush can lose rows ``write`` had taken).
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from hookbus._contract._stats import WriterStats
from hookbus._rules._validate import flag, positive_int, seconds
from hookbus._writers._deadline import DEFAULT_FLUSH_DEADLINE, FlushDeadline, WriterError
from hookbus._writers._handoff import Handoff

__all__ = ["BackgroundWriter", "WriterWarning"]

T = TypeVar("T")

_ITEM, _CALL, _FLUSH, _STOP = range(4)
_POLL_SECS = 0.05  # how often a blocked caller re-checks that the thread is still alive
_COALESCE_SECS = 0.02  # the writer thread wakes at most ~50 times a second while rows flow


class WriterWarning(RuntimeWarning):
    """A writer closed before everything it was given could be written."""


class BackgroundWriter(Generic[T]):
    """Writes items on its own thread, in order, through a bounded blocking queue.

    The callbacks run on the writer's thread only, so the file they touch needs no lock.

    Args:
        name: Shown in warnings and errors (e.g. the sink's name).
        write: Writes one item.
        write_batch: Writes the items found queued together, in order (default ``None``: ``write``
            each); one call per batch is one file check and one write for a CSV file.
        flush: Hands what ``write`` wrote to the OS (e.g. ``file.flush``).
        close: Releases the file once the thread stops (default: nothing).
        landed: After a failure, how many items that ``write`` took reached the file (asked once
            the thread has stopped). Default ``None``: every item ``write`` returned from.
        max_queue_size: Items that may wait before :meth:`put` blocks (default 1024).
        flush_secs: Longest time written items stay unflushed (default 5.0).
        flush_deadline: Seconds a :meth:`flush` may wait, and a :meth:`put` may wait on a full
            queue the thread does not empty, before the writer counts as stalled (default 30.0).
        target: What the writer writes, for the stall's report (e.g. the file's path; default:
            ``"its output"``).
    """

    def __init__(
        self,
        name: str,
        write: Callable[[T], object],
        flush: Callable[[], None],
        close: Callable[[], None] | None = None,
        *,
        landed: Callable[[], int] | None = None,
        write_batch: Callable[[list[T]], object] | None = None,
        max_queue_size: int = 1024,
        flush_secs: float = 5.0,
        flush_deadline: float = DEFAULT_FLUSH_DEADLINE,
        target: str = "its output",
    ) -> None:
        positive_int("max_queue_size", max_queue_size)
        seconds("flush_secs", flush_secs)
        self.deadline = FlushDeadline(name, seconds("flush_deadline", flush_deadline), target)
        self.name = name
        self._write = write
        self._write_batch = write_batch
        self._flush = flush
        self._close = close
        self._landed = landed
        self._given = 0  # every item offered to put(), written or not
        self._flush_secs = float(flush_secs)
        self._queue: Handoff[tuple[int, Any]] = Handoff(max_queue_size)
        self._enqueued = 0
        self._held = 0  # puts that found the queue full and waited for room
        self._held_secs = 0.0
        self._written = 0
        self._on_disk = 0  # items written as of the last flush that returned (the rest may be in a buffer)
        self._error: BaseException | None = None
        self._closed = False
        self._abandoned = False
        # Set by flush() and close(): ends the writer's row-gathering pause at once, so that a
        # checkpoint barrier waits for the writes, not for the pause.
        self._urgent = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"hookbus-writer[{name}]", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Items given to :meth:`put` and not written yet."""
        return self._enqueued - self._written

    def stats(self) -> WriterStats:
        """Rows given, written and waiting, and the queue's size (for ``bus.stats()``; never blocks)."""
        written = self._written
        stalled = self.deadline.report
        return WriterStats(
            self._enqueued,
            written,
            self._enqueued - written,
            self._queue.maxsize,
            stalled=stalled,
            held=self._held,
            held_seconds=self._held_secs,
            lost=self.lost,
        )

    # -- caller side -------------------------------------------------------------------------
    def put(self, item: T) -> None:
        """Enqueue ``item``; blocks while the queue is full. Raises :class:`WriterError`."""
        self._given += 1  # counted before any refusal: a refused row is a row not written
        if self._error is None and self.deadline.report is None and not self._closed:
            # The training thread's usual case in one call: a healthy writer with room. A failure
            # of the thread meanwhile surfaces at the next call, as one after the put does.
            try:
                self._queue.put_nowait((_ITEM, item))
            except queue.Full:
                pass
            else:
                self._enqueued += 1
                return
            began = time.perf_counter()  # a full queue: training waits for the writer
            try:
                self._enqueue(_ITEM, item)
            finally:
                self._held += 1
                self._held_secs += time.perf_counter() - began
            self._enqueued += 1
            return
        self._enqueue(_ITEM, item)
        self._enqueued += 1

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the writer's thread, after everything enqueued before it."""
        self._enqueue(_CALL, fn)

    def flush(self) -> None:
        """Block until everything enqueued so far is written and flushed to the OS."""
        done = threading.Event()
        self._enqueue(_FLUSH, done)
        self._urgent.set()
        self.deadline.wait(done, self._unwritten, self._thread.is_alive)
        self._raise_if_failed()

    def _unwritten(self) -> str:
        # Written rows may wait in a buffer that only a flush hands to the OS: count from the last one.
        rows = self._given - self._on_disk
        return f"{rows} row{'s' if rows != 1 else ''} given to it since its last completed flush may not be written"

    def close(self, deadline: float = 10.0, *, warn: bool = True) -> int:
        """Drain and stop the thread, waiting at most ``deadline`` seconds (idempotent).

        Warns with :class:`WriterWarning` (naming the writer and the count of rows not
        written) if the thread could not finish in time, unless ``warn`` is false (the caller
        reports it in its own words); raises :class:`WriterError` if it failed. Either way the
        rows are counted in :meth:`stats` (``lost``).

        Returns:
            The rows left unwritten at the deadline (0 when everything was written).
        """
        seconds("deadline", deadline)  # before anything closes: an invalid argument loses nothing
        flag("warn", warn)
        if self._closed:
            return 0
        self._closed = True
        if self.deadline.stalled:  # reported when it stalled; its thread gets no more time
            self._abandoned = True
            return self.lost
        end = time.monotonic() + deadline
        stopped = self._offer((_STOP, None), end)
        self._urgent.set()
        self._thread.join(max(0.0, end - time.monotonic()))
        if not stopped or self._thread.is_alive():
            # The thread stops at its next item and leaves the rest: nothing may write after close.
            self._abandoned = True
            lost = self.lost
            if warn:
                warnings.warn(
                    f"{self.name}: {lost} row{'s' if lost != 1 else ''} could not be written within the "
                    f"{deadline:g} s close deadline and are lost (is the disk stalled?)",
                    WriterWarning,
                    stacklevel=2,
                )
            return lost
        self._raise_if_failed()
        return 0

    def _enqueue(self, kind: int, payload: Any) -> None:
        self._raise_if_failed()
        self.deadline.check()
        if self._closed:
            raise WriterError(f"{self.name}: the writer is closed")
        self._offer((kind, payload), None)
        self._raise_if_failed()

    def _offer(self, entry: tuple[int, Any], end: float | None) -> bool:
        """Put ``entry``, blocking while full; False if ``end`` passed or the thread died.

        Without ``end`` (a caller's put or flush), a queue that stays full while the thread
        writes nothing for the flush deadline is a stall (:class:`WriterStalled`).
        """
        try:
            self._queue.put_nowait(entry)
            return True
        except queue.Full:
            pass
        progress, since = self._written, time.monotonic()
        while self._thread.is_alive():
            timeout = _POLL_SECS if end is None else min(_POLL_SECS, end - time.monotonic())
            if timeout <= 0:
                return False
            try:
                self._queue.put(entry, timeout=timeout)
                return True
            except queue.Full:
                if end is not None:
                    continue
                if self._written != progress:
                    progress, since = self._written, time.monotonic()
                elif time.monotonic() - since >= self.deadline.seconds:
                    self.deadline.stall("the writing of", self._unwritten())
        return False

    @property
    def lost(self) -> int:
        """Rows given to :meth:`put` that will never be in the file: once the thread failed, or
        once it was given up (stalled, or cut at the close deadline); else 0. A row the thread was
        writing as it was given up is counted lost until it returns."""
        if self._error is not None:
            return self._given - (self._landed() if self._landed is not None else self._written)
        if self._abandoned:
            return self._given - self._written
        return 0

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is not None:
            lost = self.lost
            raise WriterError(
                f"{self.name}: background write failed ({type(error).__name__}: {error}); "
                f"{lost} row{'s' if lost != 1 else ''} not written"
            ) from error

    # -- writer thread -----------------------------------------------------------------------
    def _run(self) -> None:
        dirty = False
        flush_at = 0.0
        failure: BaseException | None = None
        held: tuple[int, Any] | None = None  # an entry taken while gathering a batch, next in line
        try:
            while not self._abandoned:
                if held is not None:
                    (kind, payload), held = held, None
                else:
                    timeout = max(0.0, flush_at - time.monotonic()) if dirty else None
                    try:
                        kind, payload = self._queue.get(timeout=timeout)
                    except queue.Empty:
                        self._flush()
                        self._on_disk = self._written
                        dirty = False
                        continue
                if self._abandoned:
                    break
                if kind == _ITEM:
                    if self._write_batch is None:
                        self._write(payload)
                        self._written += 1
                    else:
                        batch, held = self._gather(payload)
                        self._write_batch(batch)
                        self._written += len(batch)
                    if held is None and self._queue.empty():
                        # Let rows gather: a wake-up per batch instead of per row (each one takes
                        # a core from the training step on a small machine). Puts never wait on
                        # this while the queue has room; flush() and close() cut it short.
                        self._urgent.wait(_COALESCE_SECS)
                        self._urgent.clear()
                elif kind == _CALL:
                    payload()
                else:
                    self._flush()
                    self._on_disk = self._written
                    dirty = False
                    if kind == _STOP:
                        break
                    payload.set()
                    continue
                if not dirty:
                    dirty, flush_at = True, time.monotonic() + self._flush_secs
                elif time.monotonic() >= flush_at:
                    # Rows that keep coming never let the get() above time out: flush on time anyway.
                    self._flush()
                    self._on_disk = self._written
                    dirty = False
        except BaseException as error:  # surfaced to the caller by _raise_if_failed
            failure = error
        finally:
            if self._close is not None:
                try:
                    self._close()
                except Exception as error:  # keep the first failure, report either
                    failure = failure or error
            # Published last: once callers see it, the file is closed and its counts are final.
            self._error = failure

    def _gather(self, first: T) -> tuple[list[T], tuple[int, Any] | None]:
        """``first`` and the items queued right behind it; the entry that ended the batch, if any."""
        batch = [first]
        get = self._queue.get_nowait
        while True:
            try:
                entry = get()
            except queue.Empty:
                return batch, None
            if entry[0] != _ITEM:
                return batch, entry
            batch.append(entry[1])
