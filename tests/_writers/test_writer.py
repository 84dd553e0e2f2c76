"""BackgroundWriter: blocks when full, never drops, flush barrier, close deadline, errors surface."""

from __future__ import annotations

import threading
import time

import pytest

from hookbus._writers._deadline import WriterError
from hookbus._writers._writer import BackgroundWriter, WriterWarning


class Gate:
    """A write callback that blocks until opened: an artificially slow disk."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.written: list[int] = []
        self.flushed: list[int] = []  # len(written) at each flush
        self.closed = 0

    def write(self, item: int) -> None:
        self.opened.wait()
        self.written.append(item)

    def flush(self) -> None:
        self.flushed.append(len(self.written))

    def close(self) -> None:
        self.closed += 1


def _wait_for(condition: object, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end:  # type: ignore[operator]
        time.sleep(0.01)


def test_put_blocks_only_once_the_queue_is_full_and_nothing_is_dropped() -> None:
    gate = Gate()
    writer = BackgroundWriter("slow", gate.write, gate.flush, gate.close, max_queue_size=4)
    returned = 0

    def produce() -> None:
        nonlocal returned
        for i in range(20):
            writer.put(i)
            returned += 1

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    _wait_for(lambda: returned >= 5)
    time.sleep(0.2)  # give a wrongly non-blocking put the chance to show itself
    # One item is in the stalled write, four wait in the queue; the sixth put blocks.
    assert returned == 5
    assert producer.is_alive()
    gate.opened.set()
    producer.join(10)
    writer.flush()
    assert gate.written == list(range(20))
    writer.close()
    assert gate.closed == 1


def test_flush_returns_after_everything_before_it_is_written_and_flushed() -> None:
    gate = Gate()
    gate.opened.set()
    writer = BackgroundWriter("w", gate.write, gate.flush, flush_secs=3600)
    for i in range(100):
        writer.put(i)
    writer.flush()
    assert gate.written == list(range(100))
    assert gate.flushed[-1] == 100
    assert writer.pending == 0
    writer.close()


@pytest.mark.timeout(60)
def test_flush_and_close_cut_the_row_gathering_pause_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint barrier waits for the writes, not for the writer's pause between batches."""
    import hookbus._writers._writer

    monkeypatch.setattr(hookbus._writers._writer, "_COALESCE_SECS", 3600.0)  # a pause no test outlives
    gate = Gate()
    gate.opened.set()
    writer = BackgroundWriter("w", gate.write, gate.flush, gate.close, flush_secs=3600)
    writer.put(1)
    _wait_for(lambda: writer.pending == 0)  # written: the thread now pauses for rows to gather
    writer.put(2)
    writer.flush()  # would wait out the hour without the cut
    assert gate.written == [1, 2]
    assert gate.flushed == [2]
    writer.put(3)
    _wait_for(lambda: writer.pending == 0)
    writer.close(deadline=30)
    assert gate.flushed[-1] == 3
    assert gate.closed == 1


def test_periodic_flush_without_a_flush_call() -> None:
    gate = Gate()
    gate.opened.set()
    writer = BackgroundWriter("w", gate.write, gate.flush, flush_secs=0.05)
    writer.put(1)
    _wait_for(lambda: gate.flushed)
    assert gate.flushed == [1]
    writer.close()


def test_periodic_flush_while_rows_keep_coming() -> None:
    """A steady stream never leaves the writer idle; it must still flush every flush_secs."""
    gate = Gate()
    gate.opened.set()
    writer = BackgroundWriter("w", gate.write, gate.flush, flush_secs=0.05)
    for item in range(200):  # a row every 5 ms: always one waiting when the writer looks
        writer.put(item)
        time.sleep(0.005)
        if gate.flushed:
            break
    flushed_while_streaming = list(gate.flushed)
    writer.close()
    assert flushed_while_streaming  # before close(), which flushes anyway


def test_calls_run_in_order_on_the_writer_thread() -> None:
    seen: list[object] = []
    writer = BackgroundWriter("w", seen.append, lambda: None)
    writer.put(1)
    writer.call(lambda: seen.append(threading.current_thread().name))
    writer.put(2)
    writer.flush()
    assert seen == [1, "hookbus-writer[w]", 2]
    writer.close()


def test_hung_close_returns_after_its_deadline_and_warns_with_the_count() -> None:
    gate = Gate()
    writer = BackgroundWriter("CSVSink 'metrics'", gate.write, gate.flush, gate.close, max_queue_size=8)
    for i in range(5):
        writer.put(i)
    with pytest.warns(WriterWarning, match=r"CSVSink 'metrics': 5 rows could not be written within the 0.2 s"):
        writer.close(deadline=0.2)
    gate.opened.set()  # the disk recovers: the abandoned thread writes at most its current item
    _wait_for(lambda: gate.closed)
    assert gate.written in ([], [0])
    assert gate.closed == 1
    writer.close()  # idempotent, no second warning


def test_rows_cut_at_the_close_deadline_are_counted_lost_in_stats() -> None:
    # Issue 47: the close's warning was the only trace; bus.stats() and the summary read stats().
    gate = Gate()
    writer = BackgroundWriter("w", gate.write, gate.flush, max_queue_size=8)
    for i in range(5):
        writer.put(i)
    assert writer.stats().lost == 0  # waiting is not lost
    assert writer.close(deadline=0.1, warn=False) == 5  # said by the caller in its own words
    assert (writer.stats().rows, writer.stats().written, writer.stats().lost) == (5, 0, 5)
    gate.opened.set()  # the held row lands after all: it is no longer counted lost
    _wait_for(lambda: gate.written)
    _wait_for(lambda: writer.stats().written == 1)
    assert (writer.stats().written, writer.stats().lost) == (1, 4)


def test_hung_close_with_a_full_queue_still_returns() -> None:
    gate = Gate()
    writer = BackgroundWriter("w", gate.write, gate.flush, max_queue_size=2)
    for i in range(3):
        writer.put(i)
    with pytest.warns(WriterWarning, match="w: 3 rows could not be written"):
        writer.close(deadline=0.1)
    gate.opened.set()


def test_write_errors_surface_on_the_next_call() -> None:
    def write(item: int) -> None:
        if item == 2:
            raise OSError("disk full")

    writer = BackgroundWriter("w", write, lambda: None)
    writer.put(1)
    writer.put(2)
    with pytest.raises(WriterError, match=r"w: background write failed \(OSError: disk full\)") as info:
        writer.flush()
    assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(WriterError):
        writer.put(3)
    with pytest.raises(WriterError):
        writer.close()


def test_put_blocked_on_a_full_queue_raises_when_the_thread_dies() -> None:
    release = threading.Event()

    def write(item: int) -> None:
        release.wait()
        raise OSError("gone")

    writer = BackgroundWriter("w", write, lambda: None, max_queue_size=1)
    writer.put(1)
    writer.put(2)
    threading.Timer(0.1, release.set).start()
    with pytest.raises(WriterError, match="gone"):
        writer.put(3)  # blocked on the full queue until the thread died


def test_closed_writer_refuses_puts() -> None:
    writer = BackgroundWriter[object]("w", lambda item: None, lambda: None)
    writer.close()
    with pytest.raises(WriterError, match="w: the writer is closed"):
        writer.put(1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_queue_size": 0}, r"max_queue_size must be a positive int \(got 0\)"),
        ({"flush_secs": -1}, r"flush_secs must be a positive finite number of seconds \(got -1\)"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackgroundWriter("w", lambda item: None, lambda: None, **kwargs)  # type: ignore[arg-type]


def test_a_flush_that_misses_its_deadline_stalls_the_writer_and_close_does_not_wait_again() -> None:
    """A stalled disk: the flush raises WriterStalled naming the writer, its target and the rows
    not written; later calls fail at once; close returns without waiting (nothing more to report)."""
    from hookbus.sink_api import WriterStalled

    gate = Gate()
    writer = BackgroundWriter("CSVSink", gate.write, gate.flush, gate.close, flush_deadline=0.2, target="'m.csv'")
    for i in range(3):
        writer.put(i)
    message = (
        r"^CSVSink: a flush of 'm.csv' did not return within the 0.2 s flush deadline .*; "
        r"3 rows given to it since its last completed flush may not be written"
    )
    with pytest.raises(WriterStalled, match=message):
        writer.flush()
    stalled = writer.stats().stalled
    assert stalled is not None
    assert "'m.csv'" in stalled
    with pytest.raises(WriterStalled, match=message):
        writer.flush()  # at once: a stalled writer is never waited for again
    with pytest.raises(WriterStalled):
        writer.put(3)
    writer.close(deadline=3600)  # returns now: the deadline is not spent again, and no second report
    gate.opened.set()  # the disk recovers: the abandoned thread stops at its current item
    _wait_for(lambda: gate.closed)
    assert gate.written in ([], [0])


def test_a_put_that_waits_on_a_full_queue_the_thread_never_empties_stalls() -> None:
    """Without a flush (no checkpoint), a stalled disk fills the queue: the put gives up at the deadline."""
    from hookbus.sink_api import WriterStalled

    gate = Gate()
    writer = BackgroundWriter("w", gate.write, gate.flush, max_queue_size=2, flush_deadline=0.2)
    for i in range(3):  # one in the stalled write, two queued
        writer.put(i)
    with pytest.raises(WriterStalled, match=r"^w: the writing of its output did not return within the 0.2 s"):
        writer.put(3)
    writer.close()
    gate.opened.set()


def test_a_slow_writer_that_keeps_writing_is_no_stall() -> None:
    """A full queue that drains (a slow disk, not a stalled one) blocks put but never stalls it."""

    def write(item: int) -> None:
        time.sleep(0.02)

    writer = BackgroundWriter("w", write, lambda: None, max_queue_size=1, flush_deadline=1.0)
    for i in range(100):  # 2 s of writes in all, twice the deadline, each put waiting on a full queue
        writer.put(i)
    writer.flush()
    writer.close()
    assert writer.stats().stalled is None


def test_a_flush_run_through_the_deadline_returns_its_result_or_stalls() -> None:
    """FlushDeadline.run: the mechanism for writers with a thread of their own (TensorBoard's)."""
    from hookbus.sink_api import FlushDeadline, WriterStalled

    deadline = FlushDeadline("TensorBoardSink", 0.2, "the event files in 'tb'")
    calls: list[int] = []
    deadline.run(lambda: calls.append(1), lambda: "nothing")
    assert calls == [1]

    def failing() -> None:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        deadline.run(failing, lambda: "nothing")
    assert not deadline.stalled
    release = threading.Event()
    with pytest.raises(WriterStalled, match=r"^TensorBoardSink: a flush of the event files in 'tb' .*; 7 events lost"):
        deadline.run(lambda: None if release.wait() else None, lambda: "7 events lost")
    assert deadline.stalled
    with pytest.raises(WriterStalled):
        deadline.run(lambda: calls.append(2), lambda: "")  # never called again
    assert calls == [1]
    release.set()
