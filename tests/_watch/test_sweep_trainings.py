"""Issue 49's sweep of real trainings: three small Keras fits at once (tests/_watch/_sweep_child.py), each
recorded by EventLogSink, watched by ``hookbus watch DIR`` in a real pty (80x24, no colour) with alerts to a
real HTTP server on 127.0.0.1.

The table shows one row per run with its state word, the hyper-parameters that differ as columns
(the one they share once), and sorts by the keys typed. One run SIGKILLed mid-way is announced
once as presumed dead, each other run once as finished; a watcher started again sends none of
them twice. Every wait is on the screen, a file or the server; nothing is timed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import termios
import time
from collections import Counter
from pathlib import Path

import pytest
from _summaries import fold
from _watch_pty import PtySession

from .test_alerts import Hooks

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.subprocess

CHILD = Path(__file__).with_name("_sweep_child.py")
RUNS = {"lr-0.01": (0.01, 4), "lr-0.05": (0.05, 8), "lr-0.1": (0.1, 4)}
KILLED = "lr-0.05"
_ROW = re.compile(r"^ (?:>| ) (\S+) +(live|stale|presumed dead|waiting|finished|stopped|crashed) +([\d,]+|-) ", re.M)


def table(screen: str) -> list[tuple[str, str, str]]:
    """(run, state, step) of each row of the live table, top to bottom."""
    return [(m[1], m[2], m[3]) for m in _ROW.finditer(screen)]


def states(screen: str) -> dict[str, str]:
    return {run: state for run, state, _ in table(screen)}


def until(condition: object, deadline: float = 300.0) -> None:
    assert callable(condition)
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("the condition never held")
        time.sleep(0.05)


def test_a_sweep_of_keras_fits_watched_killed_and_announced(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    gate = tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "PYTHONPATH")}
    hooks = Hooks()
    children: dict[str, subprocess.Popen[bytes]] = {}
    watcher: PtySession | None = None
    try:
        for name, (lr, units) in RUNS.items():
            config = {
                "run": str(root / name),
                "lr": lr,
                "units": units,
                "steps": 500,
                "started": str(tmp_path / f"{name}.started"),
                "gate": str(gate),
            }
            with (tmp_path / f"{name}.out").open("wb") as out:
                children[name] = subprocess.Popen(
                    [sys.executable, str(CHILD), json.dumps(config)], stdout=out, stderr=out, env=env
                )
        until(lambda: all((tmp_path / f"{name}.started").exists() for name in RUNS))
        command = [sys.executable, "-m", "hookbus", "watch", str(root), "--interval", "0.2"]
        command += ["--stale-after", "2", "--dead-after", "6", "--alert-webhook", hooks.url]
        watcher = PtySession(command, cols=80, rows=24, env={"NO_COLOR": "1"}, own_terminal=True)
        screen = watcher.wait_for(
            lambda text: states(text) == dict.fromkeys(RUNS, "live") and "q quit" in text, deadline=120
        )
        header = next(line for line in screen.splitlines() if line.split()[:2] == ["run", "state"])
        assert header.split()[-2:] == ["lr", "units"]  # the hyper-parameters that differ: columns
        assert "shared: optimizer=sgd" in screen  # the one they share: said once

        watcher.wait_for(lambda text: any(r == KILLED and s not in ("-", "0") for r, _, s in table(text)))
        children[KILLED].send_signal(signal.SIGKILL)  # mid-way: paced, far from its 1,000th step
        assert children[KILLED].wait(timeout=60) == -signal.SIGKILL
        gate.touch()  # the others run to their end
        for name, child in children.items():
            if name != KILLED:
                assert child.wait(timeout=300) == 0, (tmp_path / f"{name}.out").read_text()
        ended = {name: "finished" for name in RUNS} | {KILLED: "presumed dead"}
        screen = watcher.wait_for(lambda text: states(text) == ended, deadline=120)

        watcher.type("s")  # sorted by state: the worst first
        screen = watcher.wait_for(lambda text: "sort: state" in text)
        assert [run for run, _, _ in table(screen)][0] == KILLED
        watcher.type("s")  # by step: the killed run's, then the two that reached the end
        screen = watcher.wait_for(lambda text: "sort: step" in text)
        rows = table(screen)
        assert [run for run, _, _ in rows][0] == KILLED
        for run, _, step in rows:  # each row's step is its own log's
            assert int(step.replace(",", "")) == fold(root / run / "events.jsonl")["step"], run
        assert fold(root / KILLED / "events.jsonl")["step"] < 1000
        assert {int(step.replace(",", "")) for run, _, step in rows if run != KILLED} == {1000}

        until(
            lambda: (
                {(a["run"], a["state"]) for a in hooks.received}
                >= {(KILLED, "presumed dead"), ("lr-0.01", "finished"), ("lr-0.1", "finished")}
            ),
            deadline=60,
        )
        watcher.type("q")
        assert watcher.finish() == 0
        modes = watcher.modes()  # read from the pty once the command has exited
        assert modes == watcher.modes_before
        assert isinstance(modes[3], int)
        assert modes[3] & termios.ICANON  # lines edited again
        received = list(hooks.received)
        again = subprocess.run(  # a watcher started again: nothing changed since the last one looked
            [*command, "--once"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
        if watcher is not None:
            watcher.close()
        hooks.close()
    assert again.returncode == 6, again.stderr  # the worst state: presumed dead
    assert hooks.received == received
    kinds = Counter((a["run"], a["state"]) for a in received)
    assert kinds[(KILLED, "presumed dead")] == 1
    assert kinds[("lr-0.01", "finished")] == kinds[("lr-0.1", "finished")] == 1
    assert not any(a["state"] == "finished" for a in received if a["run"] == KILLED)
    assert all(a["state"] in ("stale", "presumed dead", "finished") for a in received), received
