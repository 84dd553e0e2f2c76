"""Output files on real disks: modes that honour the umask, one writer per file.

DESIGN "Outputs": files honour the umask like TensorFlow's own (0644 under umask 022); a second
run opening the same output file at once fails before step 1 naming the holder.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")

import hookbus  # noqa: E402 - after the importorskip
from hookbus._demo import build_linear_regression  # noqa: E402
from hookbus.sinks import CheckpointSink, CSVSink, StopAtStepSink, TensorBoardSink  # noqa: E402


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
    assert any(name.startswith("tb/events.out.tfevents.") for name in modes)
    assert {name: oct(mode) for name, mode in modes.items() if mode != reference} == {}
