"""SIGKILL around a Keras epoch's end, then resume (issue 22, item 3): a child fits with
checkpoints at epoch ends and every writing sink (writers that flush only every minute), and
is killed during an epoch's validation, in the callback right after an epoch's end (right
after its checkpoint) and 30 ms after one; it restarts each time. In the end every step,
every evaluation and every epoch is in every output exactly once: the train and eval CSVs,
the epoch CSV, the event log, TensorBoard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import hookbus

from ._helpers import csv_rows, latest_checkpoint_step, scalars

pytestmark = [pytest.mark.reliability, pytest.mark.subprocess]

CHILD = Path(__file__).with_name("_keras_child.py")
STEPS, EPOCHS = 6, 6  # as in _keras_child.py
LAST = STEPS * EPOCHS


def run_child(directory: Path, kill: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOOKBUS_TEST_KILL": kill, "TF_CPP_MIN_LOG_LEVEL": "2"}
    argv = [sys.executable, str(CHILD), str(directory)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, check=False)


def column(path: Path, name: str) -> list[int]:
    header, rows = csv_rows(path)
    return [int(float(row[header.index(name)])) for row in rows]


def test_kills_around_epoch_ends_leave_each_step_evaluation_and_epoch_once_in_every_output(tmp_path: Path) -> None:
    # Before each kill, where the resume starts: the checkpoint of the epoch before the one
    # killed in its validation (its save waits for the epoch's end), or that epoch's own.
    kills = [("validation:1", STEPS), ("epoch_end:2:0", 3 * STEPS), ("epoch_end:3:30", 4 * STEPS)]
    resumed = []
    for kill, _ in kills:
        result = run_child(tmp_path, kill)
        assert result.returncode == -signal.SIGKILL, (kill, result.stderr[-3000:])
        resumed.append(latest_checkpoint_step(tmp_path / "ckpt"))
        hookbus.read_event_log(tmp_path / "events.jsonl")  # readable after every kill
    final = run_child(tmp_path)
    assert final.returncode == 0, final.stderr[-3000:]
    assert f"done at step {LAST}" in final.stdout

    epoch_ends = [(e + 1) * STEPS for e in range(EPOCHS)]
    assert column(tmp_path / "steps.csv", "step") == list(range(1, LAST + 1))
    assert column(tmp_path / "steps.eval.csv", "step") == epoch_ends
    assert column(tmp_path / "epochs.csv", "epoch") == list(range(EPOCHS))
    assert column(tmp_path / "epochs.csv", "step") == epoch_ends

    records = hookbus.read_event_log(tmp_path / "events.jsonl")
    by_mode: dict[str, list[int]] = {}
    for r in records:
        if r["record"] == "step" and not r.get("final"):
            by_mode.setdefault(r["mode"], []).append(r["step"])
    assert by_mode["train"] == list(range(1, LAST + 1))
    assert by_mode["eval"] == epoch_ends
    assert by_mode["epoch"] == epoch_ends
    epochs = [r["values"]["epoch"] for r in records if r["record"] == "step" and r["mode"] == "epoch"]
    assert epochs == list(range(EPOCHS))

    assert [s for s, _ in scalars(tmp_path / "tb" / "train", "loss")] == list(range(1, LAST + 1))
    assert [s for s, _ in scalars(tmp_path / "tb" / "eval", "loss")] == epoch_ends
    assert resumed == [at for _, at in kills]
