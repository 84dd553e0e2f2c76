"""``hookbus watch DIR`` over a directory of runs (issue 49 item 2, the table and ``--once``).

The runs are written by the real sinks (``EventLogSink``, with their summaries) from scripted
trainings: a learning-rate sweep where one run crashed, one was stopped, one is still running (no
close, written just now) and one went silent long ago (presumed dead); a cluster's run with two
workers is one row. The command runs as a user runs it (``python -m hookbus watch``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hookbus
from hookbus.sinks import EventLogSink, StopAtStepSink
from hookbus.testing import FakeClock, ScriptedPublisher

HERE = Path(__file__).parent


def train(
    run: Path,
    lr: float,
    *,
    last: int = 30,
    crash_at: int | None = None,
    stop_at: int | None = None,
    close: bool = True,
    seed: int = 0,
    task: hookbus.Task | None = None,
    name: str = "events.jsonl",
) -> None:
    """A scripted training of ``last`` steps at ``lr``: its loss falls faster at a larger rate, its
    evaluation every 10 steps. ``close=False`` leaves the run open (no close record: a live run)."""
    bus = hookbus.EventBus(clock=FakeClock(), handle_signals=False)
    sink = bus.attach(EventLogSink(run / name, hparams={"lr": lr, "optimizer": "sgd", "seed": seed}, runs_on="each"))
    bus.attach(StopAtStepSink(last_step=last))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["loss"], task=task)
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval", task=task)

    def steps() -> None:
        pub.begin()
        pub.session(0)
        for step in range(1, last + 10):
            if crash_at == step:
                raise RuntimeError("out of memory")
            if stop_at == step:
                bus.request_stop("preempted", source="signal")
            if pub.advance({"loss": 1.0 / (1 + lr * step)}):
                break
            if step % 10 == 0:
                evaluate.evaluate({"loss": 1.2 / (1 + lr * step) + 0.01 * seed}, step=step)
        pub.end()

    if not close:  # a process killed mid-run: its log and summary as the last flush left them
        pub.begin()
        pub.session(0)
        for step in range(1, last + 1):
            pub.advance({"loss": 1.0 / (1 + lr * step)})
        sink.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        with bus:
            steps()
    except RuntimeError:
        pass


def sweep(root: Path) -> Path:
    runs = root / "runs"
    train(runs / "lr-0.1", 0.1)
    train(runs / "lr-0.3", 0.3)
    train(runs / "lr-1.0", 1.0, crash_at=12)
    train(runs / "lr-3.0", 3.0, stop_at=18)
    for name, lr in (("live/lr-0.5", 0.5), ("old/lr-0.05", 0.05)):  # killed mid-run, in a process of its own
        code = f"import test_sweep, pathlib; test_sweep.train(pathlib.Path({str(runs / name)!r}), {lr}, close=False)"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
        killed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
    old = time.time() - 3600
    for path in (runs / "old" / "lr-0.05").iterdir():
        os.utime(path, (old, old))
    for index in range(2):
        train(runs / "cluster", 0.2, task=hookbus.Task("worker", index))
    return runs


def watch(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "hookbus", "watch", *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sweep(tmp_path_factory.mktemp("sweep"))


def test_once_json_has_one_row_per_run_with_its_state_step_and_the_best_evaluation(runs: Path) -> None:
    result = watch(str(runs), "--once", "--format", "json")
    assert result.returncode == 1, result.stderr  # the worst state: a run crashed
    data = json.loads(result.stdout)
    rows = {r["run"]: r for r in data["runs"]}
    assert sorted(rows) == ["cluster", "live/lr-0.5", "lr-0.1", "lr-0.3", "lr-1.0", "lr-3.0", "old/lr-0.05"]
    assert {name: r["state"] for name, r in rows.items()} == {
        "cluster": "finished",
        "live/lr-0.5": "live",
        "lr-0.1": "finished",
        "lr-0.3": "finished",
        "lr-1.0": "crashed",
        "lr-3.0": "stopped",
        "old/lr-0.05": "presumed dead",
    }
    assert rows["lr-0.1"]["step"] == 30
    assert rows["lr-1.0"]["step"] == 11
    assert rows["lr-1.0"]["error"] == "RuntimeError: out of memory"
    assert rows["cluster"]["workers"] == 2
    assert data["shared_hparams"] == {"optimizer": "sgd", "seed": 0}
    assert rows["lr-0.3"]["hparams"]["lr"] == 0.3
    best = rows["lr-0.3"]["metrics"]["eval/loss"]
    assert (best["best_step"], best["best"]) == (20, pytest.approx(1.2 / (1 + 0.3 * 20)))
    for name, row in rows.items():  # each row is what the run's own log says
        log = next((runs / name).glob("*.jsonl"))
        records = hookbus.read_event_log(log)
        assert row["step"] >= max(r["step"] for r in records if r["record"] == "step"), name


def test_once_table_sorts_by_a_metric_and_shows_the_differing_hyperparameters_once(runs: Path) -> None:
    result = watch(str(runs), "--once", "--sort", "eval/loss", "--state", "finished", "--state", "stopped")
    assert result.returncode == 3, result.stderr  # the worst shown: stopped
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["run", "state"])
    body = lines[header + 2 :]
    names = [line.split()[0] for line in body[: body.index(next(x for x in body if not x.strip()))]]
    assert names[:4] == ["lr-3.0", "lr-0.3", "cluster", "lr-0.1"]  # best eval/loss first; no evaluation last
    text = result.stdout
    assert "shared: optimizer=sgd  seed=0" in text
    assert "lr-1.0" not in text  # crashed: filtered out
    assert "best eval/loss" in text
    assert lines[header].split()[-1] == "lr"  # the differing hyper-parameter is a column


def test_once_csv_is_one_header_and_a_row_per_run_that_matches_the_name(runs: Path) -> None:
    result = watch(str(runs), "--once", "--format", "csv", "--name", "lr-*", "--metric", "loss")
    assert result.returncode == 1, result.stderr
    table = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["run"] for r in table] == ["lr-0.1", "lr-0.3", "lr-1.0", "lr-3.0"]
    assert list(table[0])[:8] == ["run", "state", "step", "rate", "workers", "loss", "loss best", "loss best step"]
    assert float(table[1]["loss"]) == pytest.approx(1 / (1 + 0.3 * 30))
    assert table[1]["hp.lr"] == "0.3"


def test_a_row_is_read_from_the_summary_and_again_only_when_its_log_changed(runs: Path, tmp_path: Path) -> None:
    from hookbus._watch._sweep import Sweep

    root = tmp_path / "runs"
    train(root / "a", 0.1)
    train(root / "b", 0.2)
    view = Sweep(root)
    first = [(r.name, r.step, r.hparams) for r in view.rows()]
    assert view.reads == 2
    assert [(r.name, r.step, r.hparams) for r in view.rows()] == first
    assert view.reads == 2  # nothing changed: no summary read again
    train(root / "b", 0.4)  # a new training in b's folder
    rows = {r.name: r for r in view.rows()}
    assert view.reads == 3
    assert rows["b"].hparams["lr"] == 0.4


def test_a_directory_of_one_run_is_still_the_single_run_view(runs: Path) -> None:
    result = watch(str(runs / "lr-0.1"), "--once")
    assert result.returncode == 0, result.stderr
    assert "best eval/loss" not in result.stdout  # the dashboard, not the table of runs
    assert "finished" in result.stdout


def test_the_live_table_in_a_terminal_follows_the_runs_until_they_have_ended(tmp_path: Path) -> None:
    """80x24, no colour: a run is live (its process holds it open, written just now); the table
    shows it live; the run then finishes, the watcher draws it finished, and q exits with 0."""
    from _watch_pty import PtySession

    root = tmp_path / "runs"
    train(root / "lr-0.1", 0.1)
    live = root / "lr-0.2"
    bus = hookbus.EventBus(clock=FakeClock(), handle_signals=False)
    sink = bus.attach(EventLogSink(live / "events.jsonl", hparams={"lr": 0.2, "optimizer": "sgd", "seed": 0}))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["loss"])
    session = PtySession(
        [sys.executable, "-m", "hookbus", "watch", str(root), "--interval", "0.2"], env={"NO_COLOR": "1"}
    )
    try:
        with bus:
            pub.begin()
            pub.session(0)
            for step in range(1, 8):
                pub.advance({"loss": 1.0 / step})
            sink.flush()
            screen = session.wait_for(lambda text: "lr-0.2" in text and " live " in text)
            assert "2 of 2 runs" in screen
            for step in range(8, 13):
                pub.advance({"loss": 1.0 / step})
            pub.end()
        # Both ended; in a terminal the table stays up (its keys may open a run) until q.
        session.wait_for(lambda text: "all ended" in text and re.search(r"lr-0\.2 +finished", text) is not None)
        session.type("q")
        status = session.finish()
        screen = session.text
    finally:
        session.close()
    assert status == 0
    rows = {line.split()[0]: line.split()[1:3] for line in screen.splitlines() if line.strip().startswith("lr-")}
    assert rows == {"lr-0.1": ["finished", "30"], "lr-0.2": ["finished", "12"]}


def test_a_sort_or_state_that_names_nothing_fails_saying_what_there_is(runs: Path) -> None:
    result = watch(str(runs), "--once", "--sort", "eval_loss")
    assert result.returncode == 2
    assert "--sort 'eval_loss' names no column of these runs" in result.stderr
    assert "a metric (eval/loss, loss)" in result.stderr
    assert "a hyper-parameter (lr, optimizer, seed)" in result.stderr
    result = watch(str(runs), "--once", "--state", "done")
    assert result.returncode == 2
    assert "invalid choice: 'done'" in result.stderr


def test_sorted_by_state_the_worst_comes_first(runs: Path) -> None:
    worst_first = ["crashed", "presumed dead", "stale", "live", "waiting", "stopped", "finished"]
    result = watch(str(runs), "--once", "--format", "csv", "--sort", "state")
    states = [row["state"] for row in csv.DictReader(io.StringIO(result.stdout))]
    assert states[:2] == ["crashed", "presumed dead"]
    assert states[-1] == "finished"
    assert states == sorted(states, key=worst_first.index)
    result = watch(str(runs), "--once", "--format", "csv", "--sort", "state", "--reverse")
    assert [row["state"] for row in csv.DictReader(io.StringIO(result.stdout))] == states[::-1]


def test_a_directory_watched_before_its_runs_exist_becomes_the_table_when_they_appear(tmp_path: Path) -> None:
    # A user's order: `hookbus watch runs` in one terminal, the sweep's shell loop in another. Before,
    # a directory with no log yet was taken for one run's, and the watcher waited for runs/events.jsonl
    # while the runs wrote under runs/<name>/.
    watched = tmp_path / "runs"
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "hookbus", "watch", str(watched), "--interval", "0.2"]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first.startswith(f"waiting for {watched} (no event log there yet"), first
        staged = tmp_path / "staged"
        train(staged / "sweep" / "lr-0.1", 0.1)
        train(staged / "sweep" / "lr-0.3", 0.3)
        os.rename(staged, watched)  # both runs appear at once: the watcher's table then holds both
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, out
    assert "2 of 2 runs in" in out, out
    assert "sweep/lr-0.1" in out, out
    assert "sweep/lr-0.3" in out, out
