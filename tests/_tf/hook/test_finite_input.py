"""A dataset that ends: MonitoredTrainingSession stops on OutOfRangeError, and the end runs no fetch."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

tf = pytest.importorskip("tensorflow")

import hookbus  # noqa: E402 - after the importorskip
from hookbus.sinks import (  # noqa: E402
    CheckpointSink,
    ConsoleSink,
    CSVSink,
    EarlyStoppingSink,
    NanGuardSink,
    StopAtStepSink,
    TensorBoardSink,
)

ELEMENTS = 37  # one element per step: the input ends after step 37


def test_an_input_without_repeat_ends_the_run_cleanly_with_every_sink_attached(tmp_path: Path) -> None:
    finals: list[Any] = []
    ends: list[Any] = []
    seen: dict[int, float] = {}
    screen = io.StringIO()
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        data = tf.compat.v1.data.make_one_shot_iterator(tf.data.Dataset.range(ELEMENTS)).get_next()
        w = tf.compat.v1.get_variable("w", initializer=0.0)
        loss = tf.square(w - tf.cast(data % 5, tf.float32), name="loss")
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
        bus = hookbus.EventBus()
        bus.attach(ConsoleSink(console=Console(file=screen, width=120), live=False))
        bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=5))
        bus.attach(TensorBoardSink(tmp_path / "tb", every_n_steps=10))
        bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=10, every_n_secs=None))
        bus.attach(NanGuardSink("loss"))
        bus.attach(EarlyStoppingSink("loss", patience=1000))
        bus.attach(StopAtStepSink(last_step=1000))
        bus.on("after_run", lambda e: finals.append(e) if e.final else None, at_end=True, every_n_steps=1000)
        bus.on("end", ends.append)
        bus.on("after_run", lambda e: seen.update({e.step: e.values["loss"]}) if not e.final else None)
        hook = hookbus.EventBusHook(bus, {"loss": loss}, train_op=train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(tmp_path / "ckpt")) as session:
            while not session.should_stop():
                session.run(train_op)
    # The run ended at the input's end, with no batch asked for after the last step.
    assert [e.step for e in ends] == [ELEMENTS]
    assert bus.step == ELEMENTS
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")).endswith(f"model.ckpt-{ELEMENTS}")
    with open(tmp_path / "m.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [int(r["step"]) for r in rows] == list(range(5, ELEMENTS + 1, 5))
    # The at_end subscriber got the last values that were published, and the step they came from:
    # every step publishes (NaN guard, early stopping), so that is the last step.
    (final,) = finals
    assert final.step == ELEMENTS
    assert final.values["loss"] == seen[ELEMENTS]  # the value published at that step, not a new read
    assert "loss" in screen.getvalue()


def test_final_fetches_must_name_fetch_keys() -> None:
    with tf.Graph().as_default():
        loss = tf.constant(1.0)
        with pytest.raises(ValueError, match="final_fetches names 'acc', which is not in fetches \\['loss'\\]"):
            hookbus.EventBusHook(hookbus.EventBus(), {"loss": loss}, final_fetches=["acc"])


def _every_sink(bus: hookbus.EventBus, tmp_path: Path, screen: io.StringIO, monitor: str = "loss") -> None:
    bus.attach(ConsoleSink(console=Console(file=screen, width=120), live=False))
    bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=5))
    bus.attach(TensorBoardSink(tmp_path / "tb", every_n_steps=10))
    bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=10, every_n_secs=None))
    bus.attach(NanGuardSink("loss"))
    bus.attach(EarlyStoppingSink(monitor, patience=1000))
    bus.attach(StopAtStepSink(last_step=1000))


def test_a_custom_loop_over_a_dataset_that_ends_closes_cleanly_with_every_sink(tmp_path: Path) -> None:
    screen = io.StringIO()
    bus = hookbus.EventBus()
    _every_sink(bus, tmp_path, screen)
    w = tf.Variable(0.0)
    optimizer = tf.keras.optimizers.SGD(0.1)
    loop = hookbus.LoopPublisher(bus, keys="loss", checkpoint=tf.train.Checkpoint(w=w, optimizer=optimizer))
    ends: list[Any] = []
    bus.on("end", ends.append)
    with bus, loop:
        for x in tf.data.Dataset.range(ELEMENTS):  # no repeat(): the loop ends with the data
            with tf.GradientTape() as tape:
                loss = tf.square(w - tf.cast(x % 5, tf.float32))
            optimizer.apply_gradients([(tape.gradient(loss, w), w)])
            if loop.step({"loss": loss}):
                break
    assert [e.step for e in ends] == [ELEMENTS]
    with open(tmp_path / "m.csv", newline="") as file:
        assert [int(r["step"]) for r in csv.DictReader(file)] == list(range(5, ELEMENTS + 1, 5))
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")).endswith(f"model.ckpt-{ELEMENTS}")


def test_keras_fit_on_a_dataset_that_ends_closes_cleanly_with_every_sink(tmp_path: Path) -> None:
    import numpy as np

    screen = io.StringIO()
    bus = hookbus.EventBus()
    _every_sink(bus, tmp_path, screen)
    ends: list[Any] = []
    bus.on("end", ends.append)
    x = np.random.default_rng(0).normal(size=(ELEMENTS * 4, 3)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4)  # ELEMENTS batches, then the end
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with bus:
        model.fit(data, epochs=1, verbose=0, shuffle=False, callbacks=[hookbus.EventBusCallback(bus)])
    assert [e.step for e in ends] == [ELEMENTS]
    with open(tmp_path / "m.csv", newline="") as file:
        assert [int(r["step"]) for r in csv.DictReader(file)] == list(range(5, ELEMENTS + 1, 5))
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")).endswith(f"model.ckpt-{ELEMENTS}")


@pytest.mark.filterwarnings("ignore:Your input ran out of data:UserWarning")  # Keras's, at each end it finds
def test_keras_fit_on_an_input_of_unknown_length_ends_each_epoch_at_the_step_keras_holds(tmp_path: Path) -> None:
    """With an input of unknown length (a filtered dataset) Keras's call that finds its end
    advances ``iterations`` without a batch (20 batches, iterations 21). The epoch's events and
    its checkpoint carry what ``iterations`` holds, as a callback of Keras's reads it at the epoch's
    end; before, they carried one step less per epoch (evaluations at 20, 41, 62; ``model.ckpt-41``
    held step 42, and a resume announced a step no checkpoint was named after)."""
    import numpy as np

    batches, epochs = 20, 3
    x = np.random.default_rng(0).normal(size=(batches * 4, 3)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4).filter(lambda features, labels: True)
    assert data.cardinality() == tf.data.UNKNOWN_CARDINALITY
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    bus = hookbus.EventBus()
    bus.attach(CheckpointSink(tmp_path / "ckpt"))  # under fit: at each epoch end
    bus.attach(CSVSink(tmp_path / "epochs.csv", epochs=True))  # CSVLogger's rows, with their steps
    evaluated: list[int] = []
    bus.on("after_run", lambda event: evaluated.append(event.step) if event.mode == "eval" else None)
    ends: list[int] = []
    keras_steps: list[int] = []
    at_epoch_end = tf.keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: keras_steps.append(int(model.optimizer.iterations.numpy()))
    )
    bus.on("end", lambda event: ends.append(event.step))
    callback = hookbus.EventBusCallback(bus, keys=["loss"])
    with bus:
        model.fit(
            data,
            epochs=epochs,
            validation_data=(x[:8], x[:8, :1]),
            shuffle=False,
            verbose=0,
            callbacks=[callback, at_epoch_end],
        )
    assert keras_steps == [21, 42, 63]  # Keras's count, which a restore brings back
    assert evaluated == keras_steps
    with open(tmp_path / "epochs.csv", newline="") as file:
        assert [int(r["step"]) for r in csv.DictReader(file)] == keras_steps
    assert ends == [keras_steps[-1]]
    for step in keras_steps:
        reader = tf.train.load_checkpoint(str(tmp_path / "ckpt" / f"model.ckpt-{step}"))
        held = [
            reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k.startswith("optimizer/_iterations")
        ]
        assert held == [step]  # the checkpoint is named after the step it holds
