"""A kill between the checkpoint pointer and pruning: the next start prunes what is beyond ``keep``.

The training child (``keep=3``, a checkpoint every 25 steps) SIGKILLs itself inside its save at
step 100, after the pointer names 50, 75 and 100 and before 25 is deleted: 25's files stay on disk
and no pointer names them, so no later save would ever prune them. The next process prunes them
as it starts, before any save.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from ._helpers import csv_column, latest_checkpoint_step, run_child

pytestmark = [pytest.mark.reliability, pytest.mark.subprocess]


def steps_on_disk(directory: Path) -> list[int]:
    """Steps of every checkpoint file set in ``directory`` (any of its files)."""
    found = (re.fullmatch(r"model\.ckpt-(\d+)\..*", p.name) for p in directory.iterdir())
    return sorted({int(m.group(1)) for m in found if m})


def listed(directory: Path) -> list[int]:
    """The steps the ``checkpoint`` pointer names."""
    text = (directory / "checkpoint").read_text()
    return [int(s) for s in re.findall(r'^all_model_checkpoint_paths: ".*-(\d+)"$', text, re.MULTILINE)]


def test_a_checkpoint_left_by_a_kill_between_pointer_and_pruning_is_pruned_at_the_next_start(tmp_path: Path) -> None:
    killed = run_child(tmp_path, 200, 0, "prune:100")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    ckpt = tmp_path / "ckpt"
    # What the kill left: the pointer names the last three, the oldest is on disk, named by none.
    assert listed(ckpt) == [50, 75, 100]
    assert steps_on_disk(ckpt) == [25, 50, 75, 100]
    assert (ckpt / "model.ckpt-25.hookbus.json").exists()
    # The next start prunes it: a run that resumes at 100 and has no step left to train saves
    # nothing, so only the start can have pruned.
    restart = run_child(tmp_path, 100, 1)
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert steps_on_disk(ckpt) == [50, 75, 100]
    assert listed(ckpt) == [50, 75, 100]
    assert latest_checkpoint_step(ckpt) == 100  # the latest is never pruned, and it restores
    assert max(csv_column(tmp_path / "metrics.csv", "loss")) == 100
    # Training goes on from there with keep=3 as usual.
    finish = run_child(tmp_path, 130, 2)
    assert finish.returncode == 0, finish.stderr[-3000:]
    assert steps_on_disk(ckpt) == listed(ckpt) == [100, 125, 130]


def test_only_hookbus_checkpoints_are_pruned_at_start_and_never_without_a_latest(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    from hookbus._checkpoints._store import recover, step_of
    from hookbus._tf import _checkpoint_tf1 as files

    checkpoint = tf.train.Checkpoint(v=tf.Variable(1.0))
    prefixes = [checkpoint.write(str(tmp_path / f"model.ckpt-{step}")) for step in (1, 2, 3, 4)]
    # Nothing is pruned while no pointer names a checkpoint: there is no latest to keep.
    files.TENSORFLOW.write_state(prefixes[1], {"step": 2})
    assert recover(files.TENSORFLOW, str(tmp_path), 1) == ([], [])
    # 1: TensorFlow's own, unlisted (a Saver's keep_checkpoint_every_n_hours): no state file, kept.
    # 2: hookbus's, no longer listed (a kill before pruning). 3, 4: listed, keep=1 keeps 4.
    for prefix in prefixes[2:]:
        files.TENSORFLOW.write_state(prefix, {"step": step_of(prefix)})
    files.TENSORFLOW.set_pointer(str(tmp_path), prefixes[2:])
    kept, dropped = recover(files.TENSORFLOW, str(tmp_path), 1)
    assert kept == [prefixes[3]]
    assert dropped == [prefixes[2], prefixes[1]]
    for prefix in dropped:
        files.TENSORFLOW.remove(prefix)
    assert steps_on_disk(tmp_path) == [1, 4]
