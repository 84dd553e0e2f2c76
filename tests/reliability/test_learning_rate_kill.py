"""SIGKILL a Keras ``fit`` whose rate ReduceLROnPlateauSink steers, then resume (issue 27): the
resumed run trains every step with the rate an uninterrupted run trains it with.

The kills land where the plateau's state matters: right after the bus's end of an epoch whose
evaluation decided a reduction (the epoch's checkpoint is saved, holding the old rate, before the
new one is applied: only the sink's state has it), and during a validation after a reduction (the
resume must keep the cooldown, or it reduces an epoch early)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ._helpers import csv_column, latest_checkpoint_step

pytestmark = [pytest.mark.reliability, pytest.mark.subprocess]

CHILD = Path(__file__).with_name("_rate_child.py")
STEPS, EPOCHS = 4, 8  # as in _rate_child.py


def child(directory: Path, kill: str = "") -> subprocess.Popen[str]:
    env = {**os.environ, "HOOKBUS_TEST_KILL": kill, "TF_CPP_MIN_LOG_LEVEL": "2"}
    argv = [sys.executable, str(CHILD), str(directory)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=240)
    return process.returncode, out, err


def changes(out: str) -> list[int]:
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("change ")]


def test_a_plateau_steered_fit_killed_and_resumed_trains_every_step_with_the_uninterrupted_rate(
    tmp_path: Path,
) -> None:
    straight = child(tmp_path / "straight")  # alongside the killed ones
    killed = tmp_path / "killed"
    resumed_from, printed = [], []
    for kill in ("epoch_end:2", "validation:5"):
        code, out, err = finish(child(killed, kill))
        assert code == -signal.SIGKILL, (kill, err[-3000:])
        resumed_from.append(latest_checkpoint_step(killed / "ckpt"))
        printed.append(changes(out))
    code, out, err = finish(child(killed))
    assert code == 0, err[-3000:]
    printed.append(changes(out))
    code, straight_out, err = finish(straight)
    assert code == 0, err[-3000:]

    expected = csv_column(tmp_path / "straight" / "steps.csv", "learning_rate")
    assert sorted(expected) == list(range(1, STEPS * EPOCHS + 1))
    assert changes(straight_out) == [12, 20, 28]  # reduced at the ends of epochs 2, 4 and 6 (cooldown 2)
    assert resumed_from == [12, 20]  # each kill came after a reduction was decided, before it trained
    assert csv_column(killed / "steps.csv", "learning_rate") == expected
    # Each resume first puts back the rate decided at its checkpoint (which holds the old one).
    assert printed == [[12], [12, 20], [20, 28]]
