"""Local TensorFlow clusters for the multi-worker tests: free ports, child processes, reports.

Each task is a child process (``python <child> '<json config>'``) whose stdout and stderr go to
files in the run's output directory (``<type><index>.out`` / ``.err``), never to pipes, so a
process never blocks on a pipe nobody reads. A worker ends by printing one ``REPORT {...}``
JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (bound at once, so no two are the same)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def task_env() -> dict[str, str]:
    """A cluster task's environment: this one without its TF_CONFIG, TensorFlow's notices quiet, and
    on ``PYTHONPATH`` only the tests' child-process site (``tests/conftest.py``'s ``CHILD_SITE``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "PYTHONPATH")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent / "_child_site")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def start(child: Path, config: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start one task: ``config`` holds ``out``, ``index`` and ``type`` (default ``worker``)."""
    env = task_env()
    log = Path(config["out"]) / f"{config.get('type', 'worker')}{config['index']}"
    with log.with_suffix(".out").open("wb") as stdout, log.with_suffix(".err").open("wb") as stderr:
        return subprocess.Popen([sys.executable, str(child), json.dumps(config)], stdout=stdout, stderr=stderr, env=env)


def collect(runs: dict[str, Any], limit: float) -> None:
    """Wait for every run's ``workers`` (at most ``limit`` seconds in all; a hung one is killed)
    and set each run's ``reports`` (a worker's last REPORT, or None) and ``logs`` (stderr tails)."""
    deadline = time.monotonic() + limit
    for run in runs.values():
        reports, logs = [], []
        for index, worker in enumerate(run["workers"]):
            try:
                worker.wait(timeout=max(0.1, deadline - time.monotonic()))
                killed = ""
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
                killed = f"\n[test] killed after {limit} s: worker {index} did not stop"
            stdout = (run["out"] / f"worker{index}.out").read_text(errors="replace")
            stderr = (run["out"] / f"worker{index}.err").read_text(errors="replace") + killed
            lines = [line[len("REPORT ") :] for line in stdout.splitlines() if line.startswith("REPORT ")]
            reports.append(json.loads(lines[-1]) if lines else None)
            logs.append(stderr[-3000:])
        run["reports"], run["logs"] = reports, logs


def reports(runs: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    """The scenario's worker reports; fails with the worker's log where one did not report."""
    run = runs[scenario]
    for report, log in zip(run["reports"], run["logs"], strict=True):
        assert report is not None, log
    return list(run["reports"])


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Kill what still runs (parameter servers serve forever; workers only if they hung)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def run_example(*args: str, timeout: float = 120) -> str:
    """Run ``examples/distributed.py`` with ``args``; its combined output (it must exit 0)."""
    example = Path(__file__).resolve().parents[1] / "examples" / "distributed.py"
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    # A session of its own: on a hang, the whole group (the example and its tasks) is killed.
    proc = subprocess.Popen(
        [sys.executable, str(example), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, output
    return output
