"""A disk that stops answering never hangs training, a checkpoint or the end of a run (issue 22.1).

A stalled disk (an NFS server gone, a hung FUSE mount) is made by blocking each writer's real
write: TensorBoard's ``RecordWriter.write``, and for the CSV and the event log the file objects
that ``open`` returns for their paths (``write`` and ``flush`` wait, as on a mount that stopped
answering). The write blocks from a given step until the test's teardown releases it, so no
thread outlives the test blocked. With a ``CheckpointSink``, the next checkpoint after the stall
is saved, training goes on to its last step, and the stalled sink is disabled and reported in
``bus.stats()`` with its path and what it could not write; without one, the run ends at its
last step. A child process shows that the process then exits by itself.
"""

from __future__ import annotations

import builtins
import io
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

tf = pytest.importorskip("tensorflow")

import hookbus  # noqa: E402 - after the importorskip
from hookbus._cli._demo import build_linear_regression  # noqa: E402
from hookbus.sinks import CheckpointSink, CSVSink, EventLogSink, StopAtStepSink, TensorBoardSink  # noqa: E402

pytestmark = pytest.mark.reliability

DEADLINE = 2.0  # the stalled sink's flush deadline: short, yet far above a healthy flush of a few rows
STALL_AT = 25  # the first step whose writes block
EVERY = 20  # checkpoints at 20, 40 (the first after the stall), 60
LAST = 60


class StalledDisk:
    """Blocks the real writes of the files under ``root`` and of TensorBoard's records, from ``on``."""

    def __init__(self) -> None:
        self.on = threading.Event()
        self.release = threading.Event()
        self.blocked = threading.Event()  # a write really waited on the stalled disk

    def wait(self) -> None:
        if self.on.is_set() and not self.release.is_set():
            self.blocked.set()
            self.release.wait()


class _StallingFile:
    """A file object whose ``write`` and ``flush`` wait while the disk is stalled."""

    def __init__(self, handle: Any, disk: StalledDisk) -> None:
        self._handle, self._disk = handle, disk

    def write(self, data: Any) -> Any:
        self._disk.wait()
        return self._handle.write(data)

    def flush(self) -> None:
        self._disk.wait()
        self._handle.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _StallingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StalledDisk]:
    from tensorboard.summary.writer.record_writer import RecordWriter

    stalled = StalledDisk()
    root = str(tmp_path / "stalled")
    real_open, real_write = builtins.open, RecordWriter.write

    def stalling_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        writes = any(m in mode for m in "wax+")
        under = isinstance(file, str | os.PathLike) and os.path.abspath(os.fspath(file)).startswith(root)
        return _StallingFile(handle, stalled) if writes and under else handle

    def stalling_write(self: Any, data: bytes) -> None:
        stalled.wait()
        real_write(self, data)

    monkeypatch.setattr(builtins, "open", stalling_open)  # the event log's open()
    monkeypatch.setattr(io, "open", stalling_open)  # Path.open, the CSV's
    monkeypatch.setattr(RecordWriter, "write", stalling_write)
    before = set(threading.enumerate())
    yield stalled
    stalled.release.set()  # the disk comes back: the threads left in its writes finish and end
    writers = [
        t
        for t in set(threading.enumerate()) - before
        if t.name.startswith("hookbus-") or t.name.endswith(" close") or type(t).__name__ == "_AsyncWriterThread"
    ]
    for thread in writers:
        thread.join(30)
    assert not [t.name for t in writers if t.is_alive()]


class _Writing(TypedDict):
    """The writer settings the three sinks share."""

    flush_deadline: float
    max_queue_size: int
    flush_secs: float


def _sink(kind: str, root: Path, max_queue_size: int = 1024, flush_secs: float = 5.0) -> hookbus.sink_api.Sink:
    sink: hookbus.sink_api.Sink
    size: _Writing = {"flush_deadline": DEADLINE, "max_queue_size": max_queue_size, "flush_secs": flush_secs}
    if kind == "tensorboard":
        sink = TensorBoardSink(root / "tb", every_n_steps=1, **size)
    elif kind == "csv":
        sink = CSVSink(root / "metrics.csv", every_n_steps=1, **size)
    else:
        sink = EventLogSink(root / "events.jsonl", **size)
    return sink


def _train(
    sinks: list[hookbus.sink_api.Sink], disk: StalledDisk, directory: Path | None, *, until_blocked: bool = False
) -> tuple[hookbus.EventBus, list[int]]:
    """Train to ``LAST`` with the disk stalling from ``STALL_AT``; ``until_blocked``: the step that
    stalls it waits (at most 10 s) until a writer's thread really waits on the disk, so that every
    later row meets a writer that no longer empties its queue, however the thread was timed."""
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        for sink in [*sinks, StopAtStepSink(last_step=LAST)]:
            bus.attach(sink)
        saved: list[int] = []
        bus.on("checkpoint_saved", lambda e: saved.append(e.step))

        def stall(event: hookbus.Event) -> None:
            if event.step == STALL_AT:
                disk.on.set()
                if until_blocked:
                    disk.blocked.wait(10)

        bus.on("after_run", stall, every_n_steps=1)

        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        ckpt = None if directory is None else str(directory)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=ckpt) as session:
            while not session.should_stop():
                session.run(model.train_op)
    return bus, saved


def _check_reported(
    bus: hookbus.EventBus, sink: hookbus.sink_api.Sink, target: str, what: Callable[[str], object]
) -> None:
    stats = bus.stats()[sink.name]
    assert stats.disabled
    assert stats.writer is not None
    assert stats.writer.stalled is not None
    report = stats.writer.stalled
    assert report.startswith(f"{sink.name}: "), report
    assert target in report, report
    assert "flush deadline" in report, report
    assert what(report), report


WHAT = {
    "tensorboard": lambda r: re.search(r"; [1-9]\d* events handed to it since its last completed flush may not be", r),
    "csv": lambda r: re.search(r"; [1-9]\d* rows given to it since its last completed flush may not be written", r),
    "event_log": lambda r: re.search(r"; [1-9]\d* rows given to it since its last completed flush may not be", r),
}
TARGET = {"tensorboard": "tb", "csv": "metrics.csv", "event_log": "events.jsonl"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["tensorboard", "csv", "event_log"])
def test_a_write_stalled_mid_run_disables_the_writer_and_the_next_checkpoint_is_saved(
    kind: str, tmp_path: Path, disk: StalledDisk, caplog: pytest.LogCaptureFixture
) -> None:
    stalled = _sink(kind, tmp_path / "stalled")
    healthy = CSVSink(tmp_path / "healthy.csv", every_n_steps=1, name="healthy")
    checkpoints = CheckpointSink(tmp_path / "ckpt", every_n_steps=EVERY, every_n_secs=None, keep=10)
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        bus, saved = _train([stalled, healthy, checkpoints], disk, tmp_path / "ckpt")
    assert disk.blocked.is_set()  # a real write waited on the stalled disk
    assert bus.step == LAST
    assert saved == [20, 40, 60]  # the first checkpoint after the stall, and those after it
    assert all((tmp_path / "ckpt" / f"model.ckpt-{s}.index").exists() for s in saved)
    # Disabled at the first barrier after the stall, named with its path and what it lost.
    _check_reported(bus, stalled, TARGET[kind], WHAT[kind])
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{stalled.name!r} could not flush for the checkpoint at step 40" in m for m in messages), messages
    # Later steps trained and reached the healthy writer; the states beside later checkpoints
    # leave the stalled sink out (its output has lost the exactly-once promise).
    rows = (tmp_path / "healthy.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == list(range(1, LAST + 1))
    state = json.loads((tmp_path / "ckpt" / f"model.ckpt-{LAST}.hookbus.json").read_text())
    assert stalled.name not in state["sinks"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["tensorboard", "csv", "event_log"])
def test_a_write_stalled_before_the_end_lets_the_run_end(
    kind: str, tmp_path: Path, disk: StalledDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """No checkpoint sink: the session's end flushes every writer; the stalled one misses its
    deadline, is reported and disabled, and the run closes (its close does not wait again). The
    dashboard's closing health line names the stalled writer and its path."""
    from rich.console import Console

    from hookbus.sinks import ConsoleSink

    stalled = _sink(kind, tmp_path / "stalled")
    screen = io.StringIO()
    dashboard = ConsoleSink(Console(file=screen, width=1000), live=False, plain_every_n_secs=3600)
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        bus, saved = _train([stalled, dashboard], disk, None)
    assert disk.blocked.is_set()
    assert bus.step == LAST
    assert saved == []
    _check_reported(bus, stalled, TARGET[kind], WHAT[kind])
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{stalled.name!r} could not flush at the end of a session (step {LAST})" in m for m in messages)
    health = [line for line in screen.getvalue().splitlines() if line.startswith("  sinks: ")]
    assert health, screen.getvalue()
    # The sink is named once; what the line says about it follows in parentheses.
    assert f"errors: {stalled.name} ×1 (" in health[-1], health
    assert health[-1].count(stalled.name) == 1, health
    assert "disabled, stalled: a flush of" in health[-1], health
    assert TARGET[kind] in health[-1], health


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["tensorboard", "csv", "event_log"])
def test_a_stalled_writer_whose_queue_fills_before_any_flush_does_not_block_training(
    kind: str, tmp_path: Path, disk: StalledDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """No checkpoint, a small queue: the stalled writer's queue fills long before the session's
    end. Handing it one more row or event must not wait for ever (TensorBoard's ``add_event`` and
    a full ``BackgroundWriter`` queue both block with no timeout): it gives up at the deadline,
    the error is reported (isolated), training reaches its last step and the run ends."""
    # Flushing often, the writer's thread soon hangs in a real write and stops emptying its queue;
    # training goes on only once it does: the 35 steps left then put more rows than the queue holds
    # (without the wait, an event log that writes its lines at flushes could take every row first).
    stalled = _sink(kind, tmp_path / "stalled", max_queue_size=8, flush_secs=0.1)
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        bus, _ = _train([stalled], disk, None, until_blocked=True)
    assert disk.blocked.is_set()
    assert bus.step == LAST
    _check_reported(bus, stalled, TARGET[kind], WHAT[kind])
    assert bus.stats()[stalled.name].errors >= 2  # the stall in a handler, then the end's flush


CHILD = textwrap.dedent(
    """
    import json, os, sys, threading
    import tensorflow as tf
    from tensorboard.summary.writer.record_writer import RecordWriter
    import hookbus
    from hookbus._cli._demo import build_linear_regression
    from hookbus.sinks import CheckpointSink, CSVSink, StopAtStepSink, TensorBoardSink

    out = sys.argv[1]
    stall, never = threading.Event(), threading.Event()
    real_write = RecordWriter.write

    def write(self, data):  # the disk under the logdir stops answering, for good
        if stall.is_set():
            never.wait()
        real_write(self, data)

    RecordWriter.write = write
    report = {}
    for run, checkpoints in (("with-checkpoints", True), ("without", False)):
        stall.clear()
        with tf.Graph().as_default():
            model = build_linear_regression()
            bus = hookbus.EventBus()
            tb = bus.attach(TensorBoardSink(os.path.join(out, run, "tb"), every_n_steps=1, flush_deadline=2.0))
            bus.attach(CSVSink(os.path.join(out, run, "metrics.csv"), every_n_steps=1))
            ckpt = os.path.join(out, run, "ckpt") if checkpoints else None
            if checkpoints:
                bus.attach(CheckpointSink(ckpt, every_n_steps=20, every_n_secs=None, keep=10))
            bus.attach(StopAtStepSink(last_step=100))
            saved = []
            bus.on("checkpoint_saved", lambda e: saved.append(e.step))
            bus.on("after_run", lambda e: stall.set() if e.step == 45 else None, every_n_steps=1)
            hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
            with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=ckpt) as session:
                while not session.should_stop():
                    session.run(model.train_op)
        stats = bus.stats()[tb.name]
        report[run] = {"step": bus.step, "saved": saved, "disabled": stats.disabled, "stalled": stats.writer.stalled}
    print(json.dumps(report), flush=True)
    # Returning from here ends the process: the threads blocked in the stalled write are daemons.
    """
)


@pytest.mark.subprocess
@pytest.mark.timeout(240)
def test_the_process_exits_by_itself_after_a_stall_that_never_ends(tmp_path: Path) -> None:
    """The issue's run: TensorBoard every step, CSV, checkpoints every 20 steps, TensorBoard's
    writes blocked for ever from step 45 of 100 (it hung at step 60); then the same without
    checkpoints (it hung at the session's end). Both runs end, and so does the process."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, env=env, timeout=180, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["with-checkpoints"]["saved"] == [20, 40, 60, 80, 100]
    for run in ("with-checkpoints", "without"):
        assert report[run]["step"] == 100, report
        assert report[run]["disabled"], report
        assert os.path.join(str(tmp_path), run, "tb") in report[run]["stalled"], report
    assert "'TensorBoardSink' could not flush for the checkpoint at step 60" in result.stderr
    assert "'TensorBoardSink' could not flush at the end of a session (step 100)" in result.stderr
