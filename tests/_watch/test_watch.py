"""Issue 29: ``hookbus watch`` without TensorFlow: following a file, cuts, liveness, ``--once``.

The logs are written by the real EventLogSink, driven by a scripted publisher; the watcher's
pieces read them as ``hookbus watch`` does.
"""

from __future__ import annotations

import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import hookbus
from hookbus._cli._cli import main
from hookbus._contract._ending import CRASHED, DEAD, FINISHED, STOPPED
from hookbus._watch._command import RENDERING
from hookbus._watch._follow import LogFollower
from hookbus._watch._run import LIVE, STALE, WAITING, RunLog
from hookbus._watch._view import Gate, LogView
from hookbus.sink_api import CheckpointSaved
from hookbus.sinks import EventLogSink, StopAtStepSink
from hookbus.testing import ScriptedPublisher


def _bus(log: Path) -> hookbus.EventBus:
    """A bus recording every step in ``log`` (the sink is passive: a subscriber due every step)."""
    bus = hookbus.EventBus()
    bus.attach(EventLogSink(log, flush_secs=0.1))
    bus.on("after_run", every_n_steps=1)(lambda event: None)
    return bus


def _record(log: Path, steps: int = 5, *, stop_at: int | None = None, fail_at: int | None = None) -> None:
    """A run of ``steps`` steps (loss 1/step) recorded by EventLogSink in ``log``."""
    bus = _bus(log)
    if stop_at is not None:
        bus.attach(StopAtStepSink(last_step=stop_at))
    publisher = ScriptedPublisher(bus, ["loss"])
    with bus:
        publisher.begin()
        publisher.session()
        for step in range(1, steps + 1):
            if step == fail_at:
                raise RuntimeError(f"boom at {step}")
            if publisher.advance({"loss": 1.0 / step}):
                break
        publisher.end()


def _add(run: RunLog, record: dict[str, Any]) -> bool:
    """Hand ``run`` one record as the watcher does: its line as written, and that line parsed."""
    line = json.dumps({"v": 1, **record})
    return run.add(line, json.loads(line))


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines(keepends=True)


# -- following a file ---------------------------------------------------------------------------
def test_a_torn_last_line_is_not_data_until_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    follower = LogFollower(log)
    assert not follower.poll().exists
    log.write_text('{"v":1,"record":"begin"}\n{"v":1,"rec')
    assert follower.poll().lines == ['{"v":1,"record":"begin"}']
    assert follower.poll().lines == []  # the torn line is still not a line
    with log.open("a") as f:
        f.write('ord":"close"}\n')
    polled = follower.poll()
    assert polled.lines == ['{"v":1,"record":"close"}']
    assert not polled.reset


def test_a_replaced_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    """A resume's cut replaces the log atomically (a new inode): everything is read anew."""
    log = tmp_path / "events.jsonl"
    log.write_text("a\nb\nc\n")
    follower = LogFollower(log)
    assert follower.poll().lines == ["a", "b", "c"]
    replacement = tmp_path / "new"
    replacement.write_text("a\nb\nc\nd\n")  # longer than before: only the inode says it is new
    os.replace(replacement, log)
    polled = follower.poll()
    assert polled.reset
    assert polled.lines == ["a", "b", "c", "d"]


def test_a_shrunk_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    """A copy-truncate tool keeps the inode: a file shorter than what was read is new."""
    log = tmp_path / "events.jsonl"
    log.write_text("a\nb\nc\n")
    follower = LogFollower(log)
    follower.poll()
    with log.open("r+") as f:
        f.truncate(0)
        f.write("x\n")
    polled = follower.poll()
    assert polled.reset
    assert polled.lines == ["x"]


def test_a_file_truncated_and_written_past_the_read_position_is_read_again(tmp_path: Path) -> None:
    """Truncated and regrown between two polls (same inode, larger): the byte before the read
    position is no longer a line's end, so it is not taken for an append."""
    log = tmp_path / "events.jsonl"
    log.write_text("aa\nbb\n")
    follower = LogFollower(log)
    follower.poll()
    with log.open("r+") as f:
        f.truncate(0)
        f.write("xxxxxxx\nyy\n")
    polled = follower.poll()
    assert polled.reset
    assert polled.lines == ["xxxxxxx", "yy"]


# -- cuts ---------------------------------------------------------------------------------------
def _step(step: int, loss: float, wall_time: float | None = None) -> dict[str, Any]:
    when = wall_time or float(step)
    return {"record": "step", "step": step, "mode": "train", "wall_time": when, "values": {"loss": loss}}


def test_a_resumed_session_cuts_the_shown_history_back_to_its_step() -> None:
    run = RunLog()
    assert not _add(run, {"record": "begin", "step": 0, "wall_time": 0.0})
    _add(run, {"record": "session_created", "step": 0, "mode": "train", "wall_time": 0.0})
    for step in range(1, 8):
        assert not _add(run, _step(step, 1.0))
    assert _add(run, {"record": "session_created", "step": 4, "mode": "train", "restored": True, "wall_time": 9.0})
    assert [r["step"] for r in run.records if r["record"] == "step"] == [1, 2, 3, 4]
    assert run.step == 4
    assert not _add(run, _step(5, 0.5, 10.0))
    assert [r["step"] for r in run.records if r["record"] == "step"] == [1, 2, 3, 4, 5]


def test_the_dashboard_shows_each_step_once_across_a_cut_of_the_real_log(tmp_path: Path) -> None:
    """The real EventLogSink's cut at a resume (a replaced file) followed by a view: the
    dashboard's history is each step's value once, in order."""
    log = tmp_path / "events.jsonl"
    _record(log, steps=8)
    view = LogView(log, "events.jsonl", RENDERING.make_sink, Gate(io.StringIO(), False))
    view.poll()
    # A second run resumed from step 5 (as from a checkpoint at 5): the sink cuts the log there.
    bus = _bus(log)
    publisher = ScriptedPublisher(bus, ["loss"])
    with bus:
        publisher.begin()
        publisher.session(step=5, restored=True)
        for step in range(6, 10):
            publisher.advance({"loss": 10.0 + step})
        publisher.end()
    _, rebuilt = view.poll()
    assert rebuilt
    sink: Any = view.sink
    history = sink.snapshot.train[0].history
    assert history == (1.0, 1 / 2, 1 / 3, 1 / 4, 1 / 5, 16.0, 17.0, 18.0, 19.0)
    assert [r["step"] for r in view.run.records if r["record"] == "step"] == list(range(1, 10))


def test_a_view_takes_over_no_signal_of_the_process(tmp_path: Path) -> None:
    """A view replays the log into a bus of its own: that run leaves Ctrl-C and SIGTERM to the
    process that watches (``hookbus watch``'s own Ctrl-C), also while the view is open."""
    log = tmp_path / "events.jsonl"
    _record(log, steps=3)
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    view = LogView(log, "events.jsonl", RENDERING.make_sink, Gate(io.StringIO(), False))
    view.poll()
    assert view.sink is not None
    assert {signum: signal.getsignal(signum) for signum in before} == before


# -- liveness and --once ------------------------------------------------------------------------
def _once(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["watch", "--once", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_once_exit_status_for_a_finished_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "events.jsonl"
    _record(log, steps=5)
    status, out, _ = _once(capsys, str(log))
    assert status == 0
    assert "events.jsonl: finished | step 5" in out
    assert "loss: last 0.2" in out  # the dashboard's own summary: the last value recorded


def test_once_exit_status_for_a_run_stopped_at_a_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stop at a step is the run doing what it was asked: finished (issue 36 item 4), its reason shown."""
    log = tmp_path / "events.jsonl"
    _record(log, steps=10, stop_at=3)
    status, out, _ = _once(capsys, str(log))
    assert status == 0
    assert "events.jsonl: finished | step 3" in out
    assert "reached step 3" in out


def test_once_exit_status_for_a_crashed_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "events.jsonl"
    with pytest.raises(RuntimeError):
        _record(log, steps=10, fail_at=4)
    status, out, _ = _once(capsys, str(log))
    assert status == 1
    assert "events.jsonl: crashed" in out
    assert "RuntimeError: boom at 4" in out


def _unclosed(log: Path, age: float) -> None:
    """A run still going (no ``close`` yet) whose newest record is ``age`` seconds old."""
    _record(log, steps=5)
    kept = [line for line in _lines(log) if json.loads(line)["record"] not in ("end", "close")]
    log.write_text("".join(kept))
    then = time.time() - age
    os.utime(log, (then, then))


@pytest.mark.parametrize(("age", "status", "state"), [(0.0, 4, LIVE), (30.0, 5, STALE), (7200.0, 6, DEAD)])
def test_once_exit_status_for_a_live_stale_and_presumed_dead_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], age: float, status: int, state: str
) -> None:
    log = tmp_path / "events.jsonl"
    _unclosed(log, age)
    got, out, _ = _once(capsys, str(log), "--stale-after", "20", "--dead-after", "3600")
    assert got == status
    assert out.splitlines()[-1].startswith(f"events.jsonl: {state} | step 5")


def test_once_on_a_log_that_does_not_exist_yet_says_waiting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _once(capsys, str(tmp_path / "later" / "events.jsonl"))
    assert status == 7
    assert f"events.jsonl: {WAITING}" in out


def test_a_file_that_is_not_an_event_log_fails_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n1,0.5\n")
    status, _, err = _once(capsys, str(path))
    assert status == 2
    assert f"{path} line 1 is not an event log record" in err


def test_the_states_follow_the_records() -> None:
    run = RunLog()
    assert run.state(None, 1.0, 2.0) == WAITING
    _add(run, {"record": "begin", "step": 0, "wall_time": 0.0})
    assert [run.state(age, 1.0, 2.0) for age in (0.5, 1.5, 2.5)] == [LIVE, STALE, DEAD]
    _add(run, {"record": "stop_requested", "step": 3, "reason": "enough", "source": "signal", "wall_time": 1.0})
    assert run.state(0.0, 1.0, 2.0) == LIVE  # asked to stop, still writing
    _add(run, {"record": "close", "step": 3, "wall_time": 2.0})
    assert run.state(100.0, 1.0, 2.0) == STOPPED  # preempted (a signal)
    assert run.stop == "enough (signal, step 3)"
    finished = RunLog()
    for record in ({"record": "begin", "step": 0}, {"record": "close", "step": 3}):
        _add(finished, record)
    assert finished.state(100.0, 1.0, 2.0) == FINISHED
    _add(finished, {"record": "exception", "step": 3, "error": "ValueError: x"})
    assert finished.state(0.0, 1.0, 2.0) == CRASHED
    assert finished.error == "ValueError: x"


def test_a_log_is_stale_by_default_after_three_of_its_writers_flush_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The begin record says the writer's flush interval (0.1 s here): nothing new for 2 s is
    stale without any option (EventLogSink's default 5 s would have said live until 15 s)."""
    log = tmp_path / "events.jsonl"
    _unclosed(log, 2.0)
    status, out, _ = _once(capsys, str(log))
    assert status == 5
    assert out.splitlines()[-1].startswith("events.jsonl: stale | step 5")


def test_stale_after_is_three_of_the_longer_of_the_flush_interval_and_the_records_spacing() -> None:
    """A writer flushing every 0.1 s that records a step every 10 s (slow steps) is stale after
    30 s without a record, not 0.3 s; one flushing every 5 s with a record every 0.1 s, after 15 s."""
    for flush, spacing, stale in ((0.1, 10.0, 30.0), (5.0, 0.1, 15.0)):
        run = RunLog()
        _add(run, {"record": "begin", "step": 0, "flush_secs": flush, "wall_time": 0.0})
        for step in range(1, 6):
            _add(run, {"record": "step", "step": step, "wall_time": spacing * step})
        assert run.stale_after() == pytest.approx(stale)


# -- a cluster, evaluations, plain output -------------------------------------------------------
def _worker_log(path: Path, *, rate: float, steps: int, closed: bool, start: float) -> None:
    """A worker's log as EventLogSink(runs_on="each") writes it: global steps, local steps, times."""
    index = int(path.name.split("worker-")[1].split(".")[0])
    records: list[dict[str, Any]] = [
        {
            "v": 1,
            "record": "begin",
            "step": 0,
            "wall_time": start,
            "mode": "train",
            "keys": ["loss"],
            "task": f"worker:{index}",
            "flush_secs": 0.1,
        },
        {"v": 1, "record": "session_created", "step": 0, "wall_time": start, "mode": "train", "restored": False},
    ]
    for local in range(1, steps + 1):
        step = local * 2 + index  # the other worker advances the global step too
        records.append(
            {
                "v": 1,
                "record": "step",
                "step": step,
                "wall_time": start + local / rate,
                "mode": "train",
                "task": f"worker:{index}",
                "local_step": local,
                "loss": 1.0 / local,
            }
        )
    if closed:
        records.append({"v": 1, "record": "close", "step": records[-1]["step"], "wall_time": start + steps / rate})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_cluster_directory_shows_each_worker_its_rate_lag_and_a_straggler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Per-worker logs watched as one: each worker's own rate (its records' wall times), its lag
    behind the furthest step, the straggler told (live, under half the fastest rate), and the
    cluster's state the first of crashed, dead, stale, live... among them."""
    _worker_log(tmp_path / "events.worker-0.jsonl", rate=20.0, steps=40, closed=False, start=1000.0)
    _worker_log(tmp_path / "events.worker-1.jsonl", rate=5.0, steps=10, closed=False, start=1000.0)
    status, out, _ = _once(capsys, str(tmp_path), "--stale-after", "60")
    assert status == 4  # live
    lines = {line.split(":")[0]: line for line in out.splitlines() if line.startswith("worker ")}
    assert lines["worker 0"].startswith("worker 0: live | step 80 | 20.0 steps/s | lag 0 |")
    assert lines["worker 1"].startswith("worker 1: live, straggler | step 21 | 5.0 steps/s | lag 59 |")
    assert "cluster: global step 80" in out
    _worker_log(tmp_path / "events.worker-1.jsonl", rate=5.0, steps=10, closed=True, start=1000.0)
    status, out, _ = _once(capsys, str(tmp_path), "--stale-after", "60")
    assert status == 4  # one worker finished alone, the other live: the cluster runs
    assert "worker 1: finished | step 21" in out


def test_the_chiefs_evaluations_and_checkpoints_are_on_its_dashboard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "events.jsonl"
    bus = _bus(log)
    publisher = ScriptedPublisher(bus, ["loss"])
    evaluator = ScriptedPublisher(bus, ["loss"], mode="eval")
    with bus:
        publisher.begin()
        evaluator.begin()
        publisher.session()
        for step in range(1, 5):
            publisher.advance({"loss": 1.0 / step})
        evaluator.evaluate({"loss": 0.125}, step=4)
        publisher.publish("checkpoint_saved", CheckpointSaved("ckpt/model.ckpt-4", 4))
        publisher.end()
    status, out, _ = _once(capsys, str(log))
    assert status == 0
    assert "eval/loss: last 0.125, best (min) 0.125 at step 4" in out
    assert "checkpoint step 4" in out


def test_off_a_terminal_it_follows_with_plain_lines_until_the_run_closes(tmp_path: Path) -> None:
    """stdout a pipe: plain lines as ConsoleSink prints them, each change of state, the summary;
    started before the log exists, it waits, follows, and exits 0 when the run closes."""
    import subprocess
    import sys

    log = tmp_path / "events.jsonl"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "hookbus._cli._cli", "watch", str(log), "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        assert watcher.stdout.readline().startswith(f"waiting for {log}")
        _record(log, steps=6, stop_at=None)
        out, _ = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0
    assert "events.jsonl: finished" in out
    assert "events.jsonl: finished at step 6" in out  # ConsoleSink's own closing summary
    assert "\x1b[" not in out  # plain: no cursor movement, no colour


def test_follow_waits_for_a_next_run_in_the_same_place(tmp_path: Path) -> None:
    """``--follow``: a finished run's summary, then a next run (a fresh start replaces the log)
    is shown anew, its own summary printed at its close; Ctrl-C (SIGINT) ends the watcher, 130."""
    import select
    import signal
    import subprocess
    import sys

    log = tmp_path / "events.jsonl"
    _record(log, steps=3)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "hookbus._cli._cli", "watch", str(log), "--follow", "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    seen = b""

    def read_until(text: str) -> None:
        nonlocal seen
        until = time.monotonic() + 60
        assert watcher.stdout is not None
        while text.encode() not in seen:
            assert time.monotonic() < until, seen.decode()
            ready, _, _ = select.select([watcher.stdout], [], [], 0.1)
            if ready:
                seen += os.read(watcher.stdout.fileno(), 65536)

    try:
        read_until("events.jsonl: finished at step 3")
        _record(log, steps=7)  # a fresh start: the sink starts the log anew (a new file)
        read_until("events.jsonl: finished at step 7")
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=60) == 130
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
        if watcher.stdout is not None:
            watcher.stdout.close()
    assert seen.decode().count("events.jsonl: finished at step") == 2


def test_off_a_terminal_only_the_chief_prints_its_dashboards_lines(tmp_path: Path) -> None:
    """Worker 1's log appears first, the chief's (worker 0) later: the chief's summary is printed,
    the other worker is told by its state line only."""
    from rich.console import Console

    from hookbus._watch._watch import Watch

    _worker_log(tmp_path / "events.worker-1.jsonl", rate=5.0, steps=10, closed=True, start=1000.0)
    out = io.StringIO()
    watch = Watch(
        tmp_path, RENDERING, live=False, console=Console(file=out), stale_after=60.0, dead_after=120.0, interval=0.01
    )
    watch.poll()
    _worker_log(tmp_path / "events.worker-0.jsonl", rate=20.0, steps=40, closed=True, start=1000.0)
    assert watch.run() == 0
    text = out.getvalue()
    assert "worker 0: finished at step 80" in text
    assert "worker 1: finished" in text
    assert "worker 1: finished at step" not in text
    assert "per due step" not in text  # the watching bus's own costs are not the run's health


@pytest.mark.parametrize(("option", "value"), [("--dead-after", "0"), ("--stale-after", "nan"), ("--interval", "-1")])
def test_a_bad_option_fails_naming_it_and_its_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["watch", str(tmp_path), option, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: must be" in err
    assert f"(got {value})" in err


def test_each_workers_row_shows_its_examples_per_second_and_time_outside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48 item 3: a worker's step records carry the examples it trained (32 a step) and its seconds
    outside the steps (10 ms a step); its row shows both over its last records, beside its own rate. A
    worker whose records carry neither shows its rate alone."""
    _worker_log(tmp_path / "events.worker-0.jsonl", rate=20.0, steps=40, closed=False, start=1000.0)
    _worker_log(tmp_path / "events.worker-1.jsonl", rate=5.0, steps=10, closed=False, start=1000.0)
    log = tmp_path / "events.worker-0.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for record in records:
        if record["record"] == "step":
            record.update(trained_examples=record["local_step"] * 32, outside_secs=record["local_step"] * 0.01)
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    _, out, _ = _once(capsys, str(tmp_path), "--stale-after", "60")
    lines = {line.split(":")[0]: line for line in out.splitlines() if line.startswith("worker ")}
    assert lines["worker 0"].startswith(
        "worker 0: live | step 80 | 20.0 steps/s | 640 examples/s | outside 10.0 ms/step | lag 0 |"
    )
    assert lines["worker 1"].startswith("worker 1: live, straggler | step 21 | 5.0 steps/s | lag 59 |")
