"""A Keras ``fit`` stopped in the middle of an epoch (a real Ctrl-C: SIGINT) and resumed: no
step trained twice, each epoch once in every output, the run ends where an uninterrupted one
ends, with its weights; differential with Keras's own ``BackupAndRestore(save_freq=N)``
interrupted at the same step (issue 22, item 4)."""

from __future__ import annotations

import csv
import os
import signal
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _keras_data import KERAS_NP_ARRAY, data

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tensorboard.backend.event_processing import event_accumulator  # noqa: E402

import hookbus  # noqa: E402 - after the importorskip
from hookbus import EventBus, EventBusCallback  # noqa: E402
from hookbus.sinks import CheckpointSink, CSVSink, EventLogSink, TensorBoardSink  # noqa: E402

STEPS = 8  # 64 examples in batches of 8
EPOCHS = 5
STOP = 2 * STEPS + 3  # the Ctrl-C lands on the 4th batch of epoch 2
FIT = {"batch_size": 8, "epochs": EPOCHS, "shuffle": False, "verbose": 0}


TRAIN, VAL = data(STEPS * 8, 0), data(32, 1)


def model() -> Any:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    m.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return m


class CtrlCAt(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Sends this process SIGINT (what Ctrl-C sends) when the batch ending at ``step`` ends."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            os.kill(os.getpid(), signal.SIGINT)


class RaiseAt(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Raises when the batch ending at ``step`` ends: a run killed there."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            raise RuntimeError(f"interrupted at step {self.step}")


class Trained(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """The steps this fit trained: ``iterations`` after each batch Keras reports that moved it
    (a batch passed over at a mid-epoch resume is reported, and trains nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[int] = []
        self.batches = 0

    def on_train_begin(self, logs: Any = None) -> None:
        self.last = int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.batches += 1
        step = int(self.model.optimizer.iterations.numpy())
        if step != self.last:
            self.steps.append(step)
        self.last = step


def rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def fit_with_bus(directory: Path, *extra: Any) -> tuple[Any, Any, list[int]]:
    """Fit with every writing sink and ``restore=True``; a Ctrl-C in ``extra`` ends it gracefully
    (``with bus:`` then raises ``KeyboardInterrupt`` once everything is saved and closed)."""
    interrupted = any(isinstance(c, CtrlCAt) for c in extra)
    bus = EventBus()
    bus.attach(CheckpointSink(directory / "ckpt", every_n_steps=STEPS, every_n_secs=None))
    bus.attach(CSVSink(directory / "steps.csv", every_n_steps=1))
    bus.attach(CSVSink(directory / "epochs.csv", epochs=True))
    bus.attach(EventLogSink(directory / "events.jsonl"))
    bus.attach(TensorBoardSink(directory / "tb", every_n_steps=1))
    m, trained = model(), Trained()
    callback = EventBusCallback(bus, keys=["loss", "accuracy"], restore=True)
    with pytest.raises(KeyboardInterrupt, match="stopped gracefully") if interrupted else nullcontext(), bus:
        m.fit(*TRAIN, validation_data=VAL, callbacks=[*extra, callback, trained], **FIT)
    return m, m.history, trained.steps


def test_a_ctrl_c_mid_epoch_then_a_resume_trains_no_step_twice_and_ends_as_an_uninterrupted_fit(
    tmp_path: Path,
) -> None:
    whole, _, _ = fit_with_bus(tmp_path / "whole")
    run = tmp_path / "run"
    stopped, history, first = fit_with_bus(run, CtrlCAt(STOP))
    assert first == list(range(1, STOP + 1))  # the graceful stop ended fit at the step of the Ctrl-C
    assert os.path.basename(tf.train.latest_checkpoint(str(run / "ckpt"))) == f"model.ckpt-{STOP}"
    assert history.epoch == [0, 1, 2]
    # The stopped epoch is not over: it has no epoch row, no evaluation yet.
    assert [int(r["epoch"]) for r in rows(run / "epochs.csv")] == [0, 1]

    resumed, history, second = fit_with_bus(run)
    assert history.epoch == [2, 3, 4]  # the epoch it stopped in, completed; then the rest
    assert second == list(range(STOP + 1, EPOCHS * STEPS + 1))  # no step trained twice
    assert int(resumed.optimizer.iterations.numpy()) == EPOCHS * STEPS  # where the whole run ends
    for a, b in zip(resumed.get_weights(), whole.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # the same batches, in the same order

    # Every output: each step once, each epoch once, at the step of its last batch.
    assert [int(r["step"]) for r in rows(run / "steps.csv")] == list(range(1, EPOCHS * STEPS + 1))
    epoch_rows = rows(run / "epochs.csv")
    assert [(int(r["epoch"]), int(r["step"])) for r in epoch_rows] == [(e, (e + 1) * STEPS) for e in range(EPOCHS)]
    evals = [int(r["step"]) for r in rows(run / "steps.eval.csv")]
    assert evals == [(e + 1) * STEPS for e in range(EPOCHS)]
    records = hookbus.read_event_log(run / "events.jsonl")
    steps = [r["step"] for r in records if r["record"] == "step" and r["mode"] == "train" and not r.get("final")]
    assert steps == list(range(1, EPOCHS * STEPS + 1))
    epochs = [r["values"]["epoch"] for r in records if r["record"] == "step" and r["mode"] == "epoch"]
    assert epochs == list(range(EPOCHS))
    assert [r["step"] for r in records if r["record"] == "step" and r["mode"] == "eval"] == evals
    reader = event_accumulator.EventAccumulator(str(run / "tb" / "train"), size_guidance={"scalars": 0}).Reload()
    assert [e.step for e in reader.Scalars("loss")] == list(range(1, EPOCHS * STEPS + 1))
    reader = event_accumulator.EventAccumulator(str(run / "tb" / "eval"), size_guidance={"scalars": 0}).Reload()
    assert [e.step for e in reader.Scalars("loss")] == evals


@KERAS_NP_ARRAY
def test_keras_backup_and_restore_interrupted_at_the_same_step_trains_the_epochs_first_batches_twice(
    tmp_path: Path,
) -> None:
    """Differential: ``BackupAndRestore(save_freq=N)`` saved at the same mid-epoch step restarts
    that epoch at its first batch (Keras 3.15 keeps the epoch, not the batch): it trains the
    batches before the interruption twice and its weights differ from the uninterrupted run's.
    The callback, resumed from its checkpoint at that step, trains each step once and ends
    with the uninterrupted run's weights."""
    whole, _, _ = fit_with_bus(tmp_path / "whole")
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=STOP)
    with pytest.raises(RuntimeError, match=f"interrupted at step {STOP}"):
        model().fit(*TRAIN, validation_data=VAL, callbacks=[backup, RaiseAt(STOP)], **FIT)
    theirs, theirs_trained = model(), Trained()
    keras_history = theirs.fit(*TRAIN, validation_data=VAL, callbacks=[backup, theirs_trained], **FIT)

    fit_with_bus(tmp_path / "ours", CtrlCAt(STOP))  # a graceful stop: the checkpoint at that step
    ours, history, ours_trained = fit_with_bus(tmp_path / "ours")

    assert keras_history.epoch == history.epoch == [2, 3, 4]  # both resume in the epoch interrupted
    twice = STOP % STEPS
    assert len(theirs_trained.steps) == (EPOCHS - 2) * STEPS  # Keras: the whole of epoch 2 again
    assert int(theirs.optimizer.iterations.numpy()) == EPOCHS * STEPS + twice  # past the uninterrupted end
    assert len(ours_trained) == (EPOCHS - 2) * STEPS - twice  # ours: only what was not trained
    assert ours_trained == list(range(STOP + 1, EPOCHS * STEPS + 1))
    pairs = zip(theirs.get_weights(), whole.get_weights(), strict=True)
    assert not all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in pairs)  # Keras's run is another
    for a, b in zip(ours.get_weights(), whole.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
