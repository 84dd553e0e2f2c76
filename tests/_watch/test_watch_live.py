"""Issue 29: ``hookbus watch`` under a real terminal beside real training processes.

A trainer (tests/_watch/_watch_child.py: MonitoredTrainingSession, CSVSink and EventLogSink every step,
a checkpoint every 20 steps) and ``hookbus watch`` in a pty, side by side: the screen shows the
steps and values the CSV has; the trainer SIGKILLed turns the watcher stale, then presumed dead;
restarted from its checkpoint, the watcher follows the cut and shows each step once. Then a
two-worker parameter-server cluster watched as one. Every wait has a deadline; nothing is timed.
"""

from __future__ import annotations

import csv
import io
import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _clusters import free_ports, task_env
from _watch_pty import PtySession

from hookbus._watch._command import RENDERING
from hookbus._watch._view import Gate, LogView
from hookbus.sinks.console._render import format_value

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.subprocess

CHILD = Path(__file__).with_name("_watch_child.py")
_HEADER = re.compile(r"step ([\d,]+)/")
_LOSS = re.compile(r"^│ loss +(\S+)", re.MULTILINE)


def _start(config: dict[str, Any], name: str) -> subprocess.Popen[bytes]:
    env = task_env()
    out = Path(config["out"])
    with (out / f"{name}.out").open("ab") as stdout:
        return subprocess.Popen([sys.executable, str(CHILD), json.dumps(config)], stdout=stdout, stderr=stdout, env=env)


def _watch(*args: str) -> PtySession:
    command = [sys.executable, "-m", "hookbus._cli._cli", "watch", *args, "--interval", "0.1"]
    return PtySession(command, cols=80, rows=24)


def _shown(screen: str) -> tuple[int, str] | None:
    """The step in the dashboard's header and the loss in its table, from one frame."""
    step, loss = _HEADER.search(screen), _LOSS.search(screen)
    return None if step is None or loss is None else (int(step[1].replace(",", "")), loss[1])


def _states(screen: str) -> dict[str, str]:
    """Each worker's state in the cluster table (``worker 1  live ...`` rows)."""
    rows = re.finditer(r"^worker (\d+) +(live|stale|presumed dead|finished|stopped|crashed)", screen, re.MULTILINE)
    return {m[1]: m[2] for m in rows}


def _step_of(screen: str, worker: str) -> int:
    """A worker's newest step in the cluster table (``-1`` before its row shows one)."""
    states = "live|stale|presumed dead|finished|stopped|crashed"
    row = re.search(rf"^worker {worker} +(?:{states})\D*?([\d,]+) ", screen, re.MULTILINE)
    return int(row[1].replace(",", "")) if row else -1


def _csv(path: Path) -> dict[int, float]:
    try:
        with path.open() as f:
            return {int(row["step"]): float(row["loss"]) for row in csv.DictReader(f)}
    except FileNotFoundError:
        return {}


def _until(condition: Callable[[], bool], deadline: float = 60.0) -> None:
    until = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > until:
            raise TimeoutError("the condition never held")
        time.sleep(0.05)


@pytest.mark.reliability
def test_watch_follows_a_trainer_killed_and_resumed_from_its_checkpoint(tmp_path: Path) -> None:
    log, table = tmp_path / "events.jsonl", tmp_path / "metrics.csv"
    watcher = _watch(str(log), "--stale-after", "1.5", "--dead-after", "4")
    beside = LogView(log, "beside", RENDERING.make_sink, Gate(io.StringIO(), False))
    lags: list[float] = []  # seconds from a step's record to the screen showing it
    behind: list[int] = []  # records the log held past the step on the screen, at that moment
    seen: set[int] = set()

    def tick() -> None:  # beside the pty: a view in this process, and when each step reached the screen
        beside.poll()
        shown = _shown(watcher.text)
        if shown is not None and shown[0] not in seen and log.exists():
            seen.add(shown[0])
            record = next((r for r in beside.run.records if r["record"] == "step" and r["step"] == shown[0]), None)
            if record is not None:
                lags.append(time.time() - record["wall_time"])
                behind.append(max(beside.run.step or 0, shown[0]) - shown[0])

    trainer: subprocess.Popen[bytes] | None = None
    try:
        watcher.wait_for(lambda text: "waiting" in text)  # started before the log exists: it waits
        trainer = _start({"out": str(tmp_path), "steps": 2000, "delay": 0.03}, "first")
        screen = watcher.wait_for(lambda text: (s := _shown(text)) is not None and s[0] >= 45, tick=tick, deadline=120)
        step, loss = _shown(screen) or (0, "")
        _until(lambda: step in _csv(table))  # the CSV flushes on its own schedule
        assert format_value(_csv(table)[step]) == loss
        assert "live" in screen
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
        watcher.wait_for(lambda text: "stale" in text, tick=tick)
        watcher.wait_for(lambda text: "presumed dead" in text, tick=tick)
        trainer = _start({"out": str(tmp_path), "steps": 120, "delay": 0.03}, "second")
        assert watcher.finish(deadline=120, tick=tick) == 0  # finished at its last step: the watcher exits with it
        final = watcher.text
        assert trainer.wait(timeout=60) == 0
    finally:
        if trainer is not None and trainer.poll() is None:
            trainer.kill()
            trainer.wait()
        watcher.close()
    rows = _csv(table)
    assert sorted(rows) == list(range(1, 121))  # the CSV sink's own exactly-once
    assert _shown(final) == (120, format_value(rows[120]))
    assert "finished" in final  # a stop at the last step is the run doing what it was asked (issue 36 item 4)
    assert "reached step 120" in final
    beside.poll()
    steps = [r["step"] for r in beside.run.records if r["record"] == "step"]
    assert steps == list(range(1, 121))  # each step once, though the first run went past the cut
    sink: Any = beside.sink
    history = sink.snapshot.train[0].history
    assert history == tuple(rows[s] for s in range(121 - len(history), 121))  # no curve doubled
    print(
        f"\nrecords to screen: median {statistics.median(lags):.2f} s (max {max(lags):.2f} s), "
        f"median {statistics.median(behind)} records behind the log (max {max(behind)}), {len(lags)} samples"
    )


def test_a_parameter_server_cluster_watched_as_one(tmp_path: Path) -> None:
    """Two workers, each writing its own log, one row each with its rate and lag. Worker 1
    SIGKILLed turns stale, then presumed dead, while worker 0 stays live (a dead worker is not a
    straggler: its records stop); restarted, it rejoins, ends its loop alone (its log closes) and
    shows as finished while worker 0 trains on."""
    ps, w0, w1 = free_ports(3)
    spec = {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{w0}", f"127.0.0.1:{w1}"]}
    base = {"out": str(tmp_path), "cluster": spec, "delay": 0.03, "system_metrics": 0.5}
    tasks = [
        _start({**base, "type": "ps", "index": 0}, "ps0"),
        _start({**base, "type": "worker", "index": 0}, "worker0"),
        _start({**base, "type": "worker", "index": 1}, "worker1"),
    ]
    watcher = _watch(str(tmp_path), "--stale-after", "1.5", "--dead-after", "4")
    try:
        both = watcher.wait_for(
            lambda text: _states(text) == {"0": "live", "1": "live"} and _step_of(text, "1") >= 60, deadline=150
        )
        assert "cluster: global step" in both
        # Each worker's time outside the steps too (its records carry it; no batch size, so no examples/s).
        assert re.search(r"worker +state +step +steps/s +outside ms +lag +newest", both)
        tasks[2].send_signal(signal.SIGKILL)
        tasks[2].wait()
        watcher.wait_for(lambda text: _states(text) == {"0": "live", "1": "stale"}, deadline=60)
        host = re.escape(socket.gethostname()[:12])

        def machine_rows(text: str) -> list[tuple[str, str, str]]:
            return re.findall(rf"^{host}\S* +worker (\d) +worker:(\d) +\d+% +[\d.]+ GB .* (\S+) ago$", text, re.M)

        # A whole frame: the screen is read between writes, and a frame's rows arrive one after another
        # (a CI run once caught the last machine row half drawn). The host's line ends the frame.
        dead = watcher.wait_for(
            lambda text: (
                _states(text) == {"0": "live", "1": "presumed dead"}
                and len(machine_rows(text)) == 2
                and re.search(r"^host \S+: CPU \d+% · memory", text, re.M) is not None
            ),
            deadline=60,
        )
        rows = {line.split()[1]: line.split() for line in dead.splitlines() if re.match(r"worker \d", line)}
        assert float(rows["0"][4]) > 0  # worker 0's own rate, from its records' wall times
        assert int(rows["1"][7]) > 0  # the dead worker's lag behind the furthest step grows
        # The machine: a row per worker (both on this host), the host's own figures once.
        machine = machine_rows(dead)
        assert [(name, task) for name, task, _ in machine] == [("0", "0"), ("1", "1")], dead
        assert len(re.findall(r"^host \S+: CPU \d+% · memory", dead, re.M)) == 1, dead
        age = machine[1][2]  # worker 1's samples stopped with it: its newest is seconds old and ageing
        assert "m" in age or float(age.rstrip("s")) > 1.0, dead
        (tmp_path / "frame.txt").write_text(dead)
        tasks.append(_start({**base, "type": "worker", "index": 1, "local_steps": 40}, "worker1-again"))
        watcher.wait_for(lambda text: _states(text) == {"0": "live", "1": "live"}, deadline=150)
        watcher.wait_for(lambda text: _states(text) == {"0": "live", "1": "finished"}, deadline=120)
        (tmp_path / "stop").touch()
        assert watcher.finish(deadline=90) == 0  # both closed without a stop request: finished
    finally:
        for task in tasks:
            if task.poll() is None:
                task.kill()
                task.wait()
        watcher.close()
    print("\n" + (tmp_path / "frame.txt").read_text())
