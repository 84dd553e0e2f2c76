"""Monitors and checkpoints beside Keras's own callbacks on real fits: mode="auto", a monitor that
never comes, and CheckpointSink's default under fit (each epoch end), SIGKILL included."""

from __future__ import annotations

import csv
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _keras_data import KERAS_NP_ARRAY, data

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from hookbus import EventBus, EventBusCallback  # noqa: E402 - after the importorskip
from hookbus._checkpoints._store import step_of  # noqa: E402
from hookbus._tf import _checkpoint_tf1 as files  # noqa: E402
from hookbus.sinks import CheckpointSink, EarlyStoppingSink  # noqa: E402

STEPS = 4  # batches per epoch: 64 samples, batch 16


def model(metric: Any = "accuracy") -> Any:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    m.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[metric],
    )
    return m


FIT = {"batch_size": 16, "epochs": 30, "verbose": 0, "validation_data": data(48, 1)}


@pytest.mark.parametrize(
    ("metric", "name"),
    [
        pytest.param("accuracy", "accuracy", id="accuracy (the name tells)"),
        # A name that tells nothing: the compiled metric's own direction decides, as in Keras.
        pytest.param(keras.metrics.SparseCategoricalAccuracy(name="hits"), "hits", id="hits (the metric tells)"),
    ],
)
def test_early_stopping_on_a_rising_metric_stops_where_kerass_does(metric: Any, name: str) -> None:
    """Both in one fit: whichever stopped first would end it, so the other's decision shows any difference."""
    theirs = keras.callbacks.EarlyStopping(monitor=f"val_{name}", patience=2)
    bus = EventBus()
    ours = bus.attach(EarlyStoppingSink(f"eval/{name}", patience=2))  # mode: the default, "auto"
    x, y = data()
    with bus:
        history = model(metric).fit(x, y, **FIT, callbacks=[EventBusCallback(bus, keys=["loss", name]), theirs])
    epochs = len(history.history["loss"])
    assert 3 <= epochs < 30  # accuracy rose at first, then Keras stopped: the comparison means something
    assert theirs.stopped_epoch == epochs - 1  # Keras decided to stop at the last epoch run...
    assert ours.stopped_at == epochs * STEPS  # ...and so did we, at its end
    assert ours.rule.monitor.mode == "max"
    assert ours.state.best == pytest.approx(max(history.history[f"val_{name}"]))


@KERAS_NP_ARRAY  # Keras's .weights.h5 writer
def test_keep_best_keeps_what_model_checkpoint_save_best_only_keeps(tmp_path: Path) -> None:
    """Same fit: ModelCheckpoint(save_best_only=True) writes a file at each new best val_accuracy;
    keep_best=2 keeps the two highest, the best being Keras's last file."""
    keras_dir, ours_dir = tmp_path / "keras", tmp_path / "ours"
    theirs = keras.callbacks.ModelCheckpoint(
        str(keras_dir / "e{epoch:02d}.weights.h5"), monitor="val_accuracy", save_best_only=True, save_weights_only=True
    )
    bus = EventBus()
    sink = bus.attach(CheckpointSink(ours_dir, keep_best=2, monitor="eval/accuracy"))  # mode: the default, "auto"
    x, y = data()
    fit = {**FIT, "epochs": 8}
    with bus:
        history = model().fit(x, y, **fit, callbacks=[EventBusCallback(bus, keys=["loss", "accuracy"]), theirs])
    saved_epochs = sorted(int(p.name[1:3]) for p in keras_dir.iterdir())
    accuracy = history.history["val_accuracy"]
    assert len(saved_epochs) >= 2  # it improved: the ranking means something
    assert accuracy[-1] > accuracy[0]
    best = files.list_checkpoints(str(ours_dir / "best"))
    assert step_of(sink.best_checkpoint or "") == saved_epochs[-1] * STEPS
    kept = sorted((files.read_state_file(p) or {})["value"] for p in best)
    assert kept == pytest.approx(sorted(accuracy)[-2:])


def test_a_fit_without_validation_reports_once_that_eval_loss_never_came(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()
    stopper = bus.attach(EarlyStoppingSink("eval/loss"))
    x, y = data()
    with caplog.at_level(logging.WARNING, logger="hookbus"), bus:
        callback = EventBusCallback(bus, keys=["loss", "accuracy"])
        model().fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[callback])
    warned = [r.getMessage() for r in caplog.records if "ended without" in r.getMessage()]
    assert len(warned) == 1
    assert "epoch 1 ended without 'eval/loss'" in warned[0]
    assert "fit(validation_data=...)" in warned[0]
    assert warned[0].endswith("the epoch's keys are ['epoch/accuracy', 'epoch/loss']")
    assert stopper.state.seen == 0


def test_under_fit_the_default_checkpoint_schedule_is_each_epoch_end(tmp_path: Path) -> None:
    x, y = data()
    steps: dict[str, list[int | None]] = {}
    for label, sink in [
        ("default", CheckpointSink(tmp_path / "default")),
        ("given", CheckpointSink(tmp_path / "given", every_n_steps=5)),  # replaces the default as a whole
    ]:
        bus = EventBus()
        bus.attach(sink)
        with bus:
            model().fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[EventBusCallback(bus)])
        steps[label] = [step_of(p) for p in files.list_checkpoints(sink.directory)]
    assert steps == {"default": [4, 8, 12], "given": [5, 10, 12]}


# -- SIGKILL mid-fit with the default schedule, then resume from the last epoch end ------------------
CHILD = textwrap.dedent(
    """
    import logging, os, signal, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np, keras
    import hookbus
    from hookbus.sinks import CSVSink, CheckpointSink, EarlyStoppingSink

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    directory, kill_at = sys.argv[1], int(sys.argv[2])
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Kill(keras.callbacks.Callback):
        batches = 0

        def on_train_batch_end(self, batch, logs=None):
            Kill.batches += 1
            if int(self.model.optimizer.iterations.numpy()) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # no handler, no cleanup: what a preemption does

    bus = hookbus.EventBus()
    bus.attach(CSVSink(os.path.join(directory, "m.csv"), every_n_steps=1))
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt")))  # the default schedule
    # Validation on flipped labels: its loss is lowest at the first epoch, before the kill.
    bus.attach(EarlyStoppingSink("eval/loss", patience=100, restore_best=True))
    callback = hookbus.EventBusCallback(bus, restore=True)
    with bus:
        model.fit(x, y, batch_size=8, epochs=6, verbose=0, validation_data=(x, 1 - y), callbacks=[callback, Kill()])
    print("restored", callback.restored_from, "trained", Kill.batches, "batches up to step", callback.step)
    """
)


@pytest.mark.subprocess
@pytest.mark.reliability
def test_a_short_fit_killed_mid_epoch_resumes_from_the_last_epoch_end(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    per_epoch, epochs = 5, 6
    kill_at = 3 * per_epoch + 2
    killed = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(kill_at)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr  # SIGKILLed two batches into the fourth epoch
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "0"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    ckpt = tmp_path / "ckpt"
    last = ckpt / f"model.ckpt-{3 * per_epoch}"
    resumed = f"restored {last} trained {3 * per_epoch} batches up to step {epochs * per_epoch}"
    assert resumed in done.stdout  # from the third epoch's end: the three epochs left, each batch once
    with open(tmp_path / "m.csv") as f:
        assert [int(row["step"]) for row in csv.DictReader(f)] == list(range(1, epochs * per_epoch + 1))
    with open(tmp_path / "m.eval.csv") as f:
        evaluated = [(int(row["step"]), float(row["loss"])) for row in csv.DictReader(f)]
    assert [s for s, _ in evaluated] == [per_epoch * (e + 1) for e in range(epochs)]  # each epoch evaluated once
    best_step = min(evaluated, key=lambda item: item[1])[0]
    assert best_step <= 3 * per_epoch  # the best epoch came before the kill: its weights must come back
    assert f"restored the model's weights from step {best_step}" in done.stderr
    assert "were not kept across the restart" not in done.stderr
    assert tf.train.latest_checkpoint(str(ckpt)).endswith(f"model.ckpt-{epochs * per_epoch}")
