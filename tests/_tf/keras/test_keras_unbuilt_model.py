"""``EventBusCallback(restore=True)`` on a model Keras builds at its first batch (a ``Sequential``
without ``Input``, the model of Keras's own callback tests), beside Keras's ``ModelCheckpoint``
and ``BackupAndRestore`` on the same training (issue 36, item 5).

The scenario of Keras's ``model_checkpoint_test.py`` and ``backup_and_restore_test.py``: compile
an unbuilt model, fit it with the callback, then a second fit that resumes. Keras's
``ModelCheckpoint`` trains such a model and its ``.keras`` file continues in the next tool
(``keras.models.load_model``); ``BackupAndRestore`` refuses it. hookbus must train it from an
empty directory, and resume it from a checkpoint into a fresh unbuilt model exactly as an
uninterrupted run, where Keras's file continues.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _keras_data import KERAS_NP_ARRAY, data

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from hookbus import EventBus, EventBusCallback  # noqa: E402 - after the importorskip
from hookbus.sinks import CheckpointSink, StopAtStepSink  # noqa: E402

STEPS = 4  # 64 examples in batches of 16
EPOCHS = 4
FIRST = 2  # the epochs of the first fit; the second resumes at epoch 2
FIT = {"batch_size": 16, "shuffle": False, "verbose": 0}
TRAIN, VAL = data(STEPS * 16, 0), data(32, 1)


def unbuilt(*layers: Any) -> Any:
    """Keras's callback-test model: a ``Sequential`` without ``Input`` (built at its first batch), compiled."""
    keras.utils.set_random_seed(0)
    m = keras.Sequential(list(layers) or [keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    m.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    assert not m.built
    return m


def fit_with_bus(m: Any, directory: Path, epochs: int, *extra: Any, stop_at: int | None = None) -> Any:
    """Fit ``m`` under a bus whose CheckpointSink saves each epoch end (and at a stop at step
    ``stop_at``), with ``restore=True``; the history."""
    bus = EventBus()
    bus.attach(CheckpointSink(directory))
    if stop_at is not None:
        bus.attach(StopAtStepSink(last_step=stop_at))
    with bus:
        return m.fit(
            *TRAIN, validation_data=VAL, epochs=epochs, callbacks=[EventBusCallback(bus, restore=True), *extra], **FIT
        )


def assert_same_weights(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def latest(directory: Path) -> str:
    return str(os.path.basename(tf.train.latest_checkpoint(str(directory))))


@KERAS_NP_ARRAY
def test_an_unbuilt_model_trains_from_an_empty_directory_and_resumes_as_keras_model_checkpoint_continues(
    tmp_path: Path,
) -> None:
    whole = unbuilt()
    whole_history = whole.fit(*TRAIN, validation_data=VAL, epochs=EPOCHS, **FIT)

    # Keras: the first fit writes a .keras file each epoch; the next tool loads it and continues.
    theirs = unbuilt()
    theirs.fit(
        *TRAIN,
        validation_data=VAL,
        epochs=FIRST,
        callbacks=[keras.callbacks.ModelCheckpoint(tmp_path / "a.keras")],
        **FIT,
    )
    continued = keras.models.load_model(tmp_path / "a.keras")
    theirs_history = continued.fit(*TRAIN, validation_data=VAL, epochs=EPOCHS, initial_epoch=FIRST, **FIT)

    # hookbus: the same first fit from an empty directory (today: ValueError at the first batch).
    first = unbuilt()
    fit_with_bus(first, tmp_path / "ckpt", FIRST, keras.callbacks.ModelCheckpoint(tmp_path / "ours-first.keras"))
    assert latest(tmp_path / "ckpt") == f"model.ckpt-{FIRST * STEPS}"
    assert_same_weights(first.get_weights(), theirs.get_weights())  # hookbus changed nothing in the training
    assert_same_weights(keras.models.load_model(tmp_path / "ours-first.keras").get_weights(), theirs.get_weights())

    # The second fit: a fresh unbuilt model (a restarted process), resumed from the checkpoint.
    resumed = unbuilt()
    history = fit_with_bus(resumed, tmp_path / "ckpt", EPOCHS, keras.callbacks.ModelCheckpoint(tmp_path / "ours.keras"))
    assert history.epoch == theirs_history.epoch == list(range(FIRST, EPOCHS))  # no initial_epoch needed
    np.testing.assert_allclose(history.history["loss"], theirs_history.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(history.history["loss"], whole_history.history["loss"][FIRST:], rtol=1e-5)
    assert int(resumed.optimizer.iterations.numpy()) == int(continued.optimizer.iterations.numpy()) == EPOCHS * STEPS
    assert_same_weights(resumed.get_weights(), whole.get_weights())  # the first step trained from the restored weights
    assert_same_weights(resumed.get_weights(), continued.get_weights())
    # What the next tool reads: the .keras file Keras's ModelCheckpoint wrote beside hookbus holds the
    # weights of Keras's own continued run, and its optimizer the same step.
    reloaded = keras.models.load_model(tmp_path / "ours.keras")
    assert_same_weights(reloaded.get_weights(), continued.get_weights())
    assert int(reloaded.optimizer.iterations.numpy()) == EPOCHS * STEPS
    assert latest(tmp_path / "ckpt") == f"model.ckpt-{EPOCHS * STEPS}"

    # A third fit with nothing left to train builds nothing and saves nothing over the last checkpoint.
    assert fit_with_bus(unbuilt(), tmp_path / "ckpt", EPOCHS).epoch == []
    assert latest(tmp_path / "ckpt") == f"model.ckpt-{EPOCHS * STEPS}"
    again = unbuilt()
    fit_with_bus(again, tmp_path / "ckpt", EPOCHS + 1)
    assert int(again.optimizer.iterations.numpy()) == (EPOCHS + 1) * STEPS
    more = keras.models.load_model(tmp_path / "ours.keras")
    more.fit(*TRAIN, validation_data=VAL, epochs=EPOCHS + 1, initial_epoch=EPOCHS, **FIT)
    assert_same_weights(again.get_weights(), more.get_weights())


@KERAS_NP_ARRAY
def test_keras_backup_and_restore_refuses_the_unbuilt_model_that_the_callback_trains(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="BackupAndRestore"):
        unbuilt().fit(*TRAIN, epochs=1, callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))], **FIT)
    assert fit_with_bus(unbuilt(), tmp_path / "ckpt", 1).epoch == [0]


def test_a_checkpoint_of_another_model_fails_at_the_first_batch_naming_it_and_saves_nothing(tmp_path: Path) -> None:
    fit_with_bus(unbuilt(), tmp_path / "ckpt", 1)
    saved = sorted(os.listdir(tmp_path / "ckpt"))
    other = unbuilt(keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2), keras.layers.Dense(2))
    with pytest.raises(RuntimeError, match=f"checkpoint .*model.ckpt-{STEPS} has no value for variables"):
        fit_with_bus(other, tmp_path / "ckpt", 2)
    assert latest(tmp_path / "ckpt") == f"model.ckpt-{STEPS}"
    assert [f for f in sorted(os.listdir(tmp_path / "ckpt")) if "model.ckpt" in f] == [
        f for f in saved if "model.ckpt" in f
    ]


def test_an_unbuilt_model_resumed_in_the_middle_of_an_epoch_ends_as_an_uninterrupted_fit(tmp_path: Path) -> None:
    """The batches of the resumed epoch trained before the stop are read without training (the
    model is still unbuilt then); the first batch trained builds it from the checkpoint's values."""
    whole = unbuilt()
    whole.fit(*TRAIN, validation_data=VAL, epochs=EPOCHS, **FIT)
    stop = STEPS + 2  # the 3rd batch of epoch 1
    fit_with_bus(unbuilt(), tmp_path / "ckpt", EPOCHS, stop_at=stop)
    assert latest(tmp_path / "ckpt") == f"model.ckpt-{stop}"
    resumed = unbuilt()
    assert fit_with_bus(resumed, tmp_path / "ckpt", EPOCHS).epoch == list(range(1, EPOCHS))
    assert int(resumed.optimizer.iterations.numpy()) == EPOCHS * STEPS
    assert_same_weights(resumed.get_weights(), whole.get_weights())
