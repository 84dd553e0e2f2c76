"""Shared by the reliability tests: the long/short switch, file readers, the training child."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

#: ``HOOKBUS_RELIABILITY_LONG=1`` runs the long version (many kill trials, the 1,000,000-step soak).
LONG = os.environ.get("HOOKBUS_RELIABILITY_LONG", "") not in ("", "0")

CHILD = Path(__file__).with_name("_train_child.py")


def run_child(
    directory: Path, last_step: int, gen: int, kill: str = "", *, mode: str = "train", timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run the training child (see ``_train_child.py``) to completion or to its own SIGKILL."""
    env = {**os.environ, "HOOKBUS_TEST_KILL": kill, "TF_CPP_MIN_LOG_LEVEL": "2"}
    argv = [sys.executable, str(CHILD), str(directory), str(last_step), str(gen), mode]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


def sigterm_child(directory: Path, gen: int, *, last_step: int = 10**6) -> subprocess.CompletedProcess[str]:
    """Run the training child in ``signal`` mode (slow steps from step 30) and send it SIGTERM once
    it prints its marker; its output and exit status, as :func:`run_child` returns them."""
    env = {**os.environ, "HOOKBUS_TEST_KILL": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    argv = [sys.executable, str(CHILD), str(directory), str(last_step), str(gen), "signal"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "marker" in line:
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows; every line must parse as CSV with the header's width."""
    lines = path.read_text().splitlines()
    header, *rows = list(csv.reader(lines))
    assert all(len(row) == len(header) for row in rows), "a CSV line does not have the header's width"
    return header, rows


def csv_column(path: Path, column: str) -> dict[int, float]:
    """``{step: value}`` of one column, asserting each step appears once."""
    header, rows = csv_rows(path)
    steps = [int(row[0]) for row in rows]
    assert len(steps) == len(set(steps)), f"a step appears twice in {path}"
    index = header.index(column)
    return {int(row[0]): float(row[index]) for row in rows}


def latest_checkpoint_step(directory: Path) -> int | None:
    """The step the ``checkpoint`` pointer names (what a new session restores), without TensorFlow."""
    pointer = directory / "checkpoint"
    if not pointer.exists():
        return None
    found = re.search(r'^model_checkpoint_path: "(?:.*-)?(\d+)"$', pointer.read_text(), re.MULTILINE)
    return int(found.group(1)) if found else None


def read_log(directory: Path) -> list[dict[str, Any]]:
    """The child's ``log.jsonl`` (every line complete: each is written and flushed at once)."""
    path = directory / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def scalars(logdir: Path, tag: str) -> list[tuple[int, float]]:
    """``(step, value)`` of ``tag`` as TensorBoard's legacy EventAccumulator shows it."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0}).Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]
