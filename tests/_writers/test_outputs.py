"""Output files on real disks: modes that honour the umask, one writer per file.

tests/reliability/README.md ("Output files are readable like TensorFlow's own", "One writer per
file"): files honour the umask like TensorFlow's own (0644 under umask 022); a second run opening
the same output file at once fails before step 1 naming the holder.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")

import hookbus  # noqa: E402 - after the importorskip
from hookbus import OutputInUseError  # noqa: E402
from hookbus._cli._demo import build_linear_regression  # noqa: E402
from hookbus.sinks import CheckpointSink, CSVSink, EventLogSink, StopAtStepSink, TensorBoardSink  # noqa: E402
from hookbus.testing import ScriptedPublisher  # noqa: E402


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under ``request.param`` as the process umask, restored after."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def train(out: Path, last_step: int, keys: tuple[str, ...] = ("loss",)) -> None:
    """A real TF1 run with every file-writing sink, resuming from ``out/ckpt``."""
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(CSVSink(out / "metrics.csv", every_n_steps=1))
        bus.attach(TensorBoardSink(out / "tb", every_n_steps=1))
        bus.attach(CheckpointSink(out / "ckpt", every_n_steps=5, every_n_secs=None, keep=2))
        bus.attach(StopAtStepSink(last_step=last_step))
        fetches: dict[str, Any] = {"loss": model.loss, "accuracy": model.accuracy}
        hook = hookbus.EventBusHook(bus, {k: fetches[k] for k in keys}, train_op=model.train_op)
        ckpt = str(out / "ckpt")
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=ckpt) as session:
            while not session.should_stop():
                session.run(model.train_op)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002], indirect=True, ids=["022", "077", "002"])
def test_every_output_file_has_the_mode_tensorflow_gives_its_own_checkpoint_files(tmp_path: Path, umask: int) -> None:
    train(tmp_path, 10)
    # A second run with a new key rewrites the CSV atomically with a wider header (a temp file
    # renamed over it), saves again (pointer and state files rewritten) and starts a new event file.
    train(tmp_path, 20, keys=("loss", "accuracy"))
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0] == "step,wall_time,loss,accuracy"
    # The differential reference: a file TensorFlow itself wrote in the same runs.
    reference = stat.S_IMODE((tmp_path / "ckpt" / "model.ckpt-20.index").stat().st_mode)
    assert reference == 0o666 & ~umask
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*") if p.is_file()}
    # hookbus's own files are all there: the CSV, the pointer, the state files, the event files.
    assert {"metrics.csv", "ckpt/checkpoint", "ckpt/model.ckpt-20.hookbus.json"} <= modes.keys()
    assert any(name.startswith("tb/train/events.out.tfevents.") for name in modes)  # the training run
    assert {name: oct(mode) for name, mode in modes.items() if mode != reference} == {}


HOLDER = textwrap.dedent(
    """
    import os, sys, time
    import tensorflow as tf
    import hookbus
    from hookbus._cli._demo import build_linear_regression
    from hookbus.sinks import CheckpointSink, CSVSink, StopAtStepSink, TensorBoardSink

    out = sys.argv[1]
    tf.compat.v1.disable_eager_execution()

    def hold(event):
        if event.step == 6:  # the checkpoint of step 5 is saved: every output is open
            with open(os.path.join(out, "holding"), "w") as file:
                file.write(str(os.getpid()))
            while not os.path.exists(os.path.join(out, "go")):
                time.sleep(0.02)

    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(CSVSink(os.path.join(out, "metrics.csv"), every_n_steps=1))
        bus.attach(TensorBoardSink(os.path.join(out, "tb"), every_n_steps=1))
        bus.attach(CheckpointSink(os.path.join(out, "ckpt"), every_n_steps=5, every_n_secs=None))
        bus.attach(StopAtStepSink(last_step=10))
        bus.on("after_run", hold)
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        ckpt = os.path.join(out, "ckpt")
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=ckpt) as session:
            while not session.should_stop():
                session.run(model.train_op)
    """
)


@contextlib.contextmanager
def holder(out: Path) -> Iterator[subprocess.Popen[str]]:
    """A real training process that holds every output under ``out`` until ``out/go`` exists."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "holding").exists():
            assert child.poll() is None, child.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the holder did not reach step 6"
            time.sleep(0.05)
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


def second_run(sink: hookbus.sink_api.Sink, out: Path, last_step: int = 20) -> list[int]:
    """Train with ``sink`` (and a stop) on ``out``'s checkpoints; the steps published."""
    steps: list[int] = []
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(sink)
        bus.attach(StopAtStepSink(last_step=last_step))
        bus.on("after_run", lambda event: steps.append(event.step))
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(out / "ckpt")) as session:
            while not session.should_stop():
                session.run(model.train_op)
    return steps


@pytest.mark.subprocess
def test_a_second_run_on_the_same_outputs_fails_before_step_1_naming_the_holder(tmp_path: Path) -> None:
    with holder(tmp_path) as child:
        attempts = {
            "CSV file": (CSVSink(tmp_path / "metrics.csv", every_n_steps=1), tmp_path / "metrics.csv"),
            "TensorBoard run": (TensorBoardSink(tmp_path / "tb", every_n_steps=1), tmp_path / "tb" / "train"),
            "checkpoint directory": (CheckpointSink(tmp_path / "ckpt", every_n_steps=5), tmp_path / "ckpt"),
        }
        for what, (sink, path) in attempts.items():
            steps: list[int] = []
            with pytest.raises(OutputInUseError) as raised:
                steps = second_run(sink, tmp_path)
            message = str(raised.value)
            assert f"the {what} {str(path)!r} is being written by another run: pid {child.pid}" in message
            assert socket.gethostname() in message
            assert steps == []  # before step 1
        # A sidecar evaluator writing the eval files beside training's (logdir/eval, <stem>.eval.csv) is fine.
        bus = hookbus.EventBus()
        bus.attach(CSVSink(tmp_path / "metrics.csv"))
        bus.attach(TensorBoardSink(tmp_path / "tb"))
        evaluator = ScriptedPublisher(bus, ["loss"], mode="eval")
        with bus:
            evaluator.begin()
            evaluator.evaluate({"loss": 0.5}, step=5)
            evaluator.end()
        assert (tmp_path / "metrics.eval.csv").read_text().splitlines()[1].startswith("5,")
        assert any(p.name.startswith("events.out.tfevents.") for p in (tmp_path / "tb" / "eval").iterdir())
        (tmp_path / "go").touch()
        assert child.wait(120) == 0
    # The holder's files are whole: the attempts wrote nothing into them.
    assert [int(row[0]) for row in csv_rows(tmp_path / "metrics.csv")] == list(range(1, 11))
    # The holder closed its run: a run after it writes every output, resuming at its last checkpoint.
    out = tmp_path
    assert second_run(CSVSink(out / "metrics.csv", every_n_steps=1), out, last_step=12) == [11, 12]
    assert second_run(CheckpointSink(out / "ckpt", every_n_steps=5), out, last_step=14) == [11, 12, 13, 14]
    assert second_run(TensorBoardSink(out / "tb", every_n_steps=1), out, last_step=16) == [15, 16]


@pytest.mark.subprocess
def test_the_lock_goes_with_a_killed_holder(tmp_path: Path) -> None:
    with holder(tmp_path) as child:
        child.send_signal(signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL
    steps: list[int] = []
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(CSVSink(tmp_path / "metrics.csv", every_n_steps=1))
        bus.attach(TensorBoardSink(tmp_path / "tb", every_n_steps=1))
        bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=5, every_n_secs=None))
        bus.attach(StopAtStepSink(last_step=8))
        bus.on("after_run", lambda event: steps.append(event.step))
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(tmp_path / "ckpt")) as session:
            while not session.should_stop():
                session.run(model.train_op)
    assert steps == [6, 7, 8]  # resumed from the killed holder's checkpoint of step 5
    assert [int(row[0]) for row in csv_rows(tmp_path / "metrics.csv")] == list(range(1, 9))


def csv_rows(path: Path) -> list[list[str]]:
    header, *rows = list(csv.reader(path.read_text().splitlines()))
    assert header[:2] == ["step", "wall_time"]
    assert all(len(row) == len(header) for row in rows)
    return rows


def test_a_csv_deleted_or_replaced_mid_run_is_reported_and_every_later_row_is_in_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "metrics.csv"
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        sink = bus.attach(CSVSink(path, every_n_steps=1))
        bus.attach(StopAtStepSink(last_step=100))

        @bus.on("after_run")
        def meddle(event: Any) -> None:  # after the sink received the step (registered later)
            if event.step == 50:
                sink.flush()  # rows 1..50 are in the file ...
                path.unlink()  # ... which a cleanup script deletes
            elif event.step == 75:
                sink.flush()
                copy = tmp_path / "copy.csv"  # an editor's save: a new file with the same rows
                copy.write_text(path.read_text())
                os.replace(copy, path)

        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with (
            caplog.at_level(logging.WARNING, logger="hookbus"),
            bus,
            hookbus.monitored_training_session(hooks=[hook]) as session,
        ):
            while not session.should_stop():
                session.run(model.train_op)
    assert path.read_text().splitlines()[0] == "step,wall_time,loss"
    # The deleted rows went with the file; every row after the deletion is there, exactly once.
    assert [int(row[0]) for row in csv_rows(path)] == list(range(51, 101))
    reports = [r.getMessage() for r in caplog.records if r.name == "hookbus" and r.levelno == logging.WARNING]
    assert any(m.startswith(f"CSVSink: {str(path)!r} was deleted (or moved) while the run wrote it") for m in reports)
    assert any(m.startswith(f"CSVSink: {str(path)!r} was replaced by another file") for m in reports)


def test_two_sinks_of_one_process_on_one_file_conflict_and_a_closed_run_lets_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    bus = hookbus.EventBus()
    bus.attach(CSVSink(path, every_n_steps=1))
    bus.attach(CSVSink(path, every_n_steps=1, name="again"))
    with pytest.raises(OutputInUseError, match=r"again: the CSV file .* pid \d+ \(this process"), bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}])
    for start in (0, 2):  # sequential runs, in this process: each closes, the next may write
        bus = hookbus.EventBus()
        bus.attach(CSVSink(path, every_n_steps=1))
        with bus:
            ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}] * 2, start=start)
    assert [int(row[0]) for row in csv_rows(path)] == [1, 2, 3, 4]


def test_two_event_logs_on_one_file_conflict_and_a_closed_run_lets_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    bus = hookbus.EventBus()
    bus.attach(EventLogSink(path))
    bus.attach(EventLogSink(path, name="again"))
    bus.on("after_run", lambda event: None)  # a passive log records what someone is sent
    with pytest.raises(OutputInUseError, match=r"again: the event log .* pid \d+ \(this process"), bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}])
    for start in (0, 2):  # sequential runs, in this process: each closes, the next may write
        bus = hookbus.EventBus()
        bus.attach(EventLogSink(path))
        bus.on("after_run", lambda event: None)
        with bus:
            ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}] * 2, start=start)
    steps = [r["step"] for r in hookbus.read_event_log(path) if r["record"] == "step"]
    assert steps == [1, 2, 3, 4]
