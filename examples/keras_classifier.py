"""A small Keras classifier observed through hookbus: dashboard, TensorBoard, CSV, checkpoints,
early stopping on ``eval/loss``, then a second ``fit`` that resumes from the checkpoint.

The data are generated with numpy (two noisy Gaussian blobs per class), so nothing is
downloaded. One :class:`hookbus.EventBusCallback` replaces Keras's TensorBoard, CSVLogger,
ModelCheckpoint and EarlyStopping callbacks; the sinks are the same ones the TF1 hook and the
custom-loop publisher feed.

From the repository root, after the README's first command::

    .venv/bin/python examples/keras_classifier.py [--epochs 30] [--dir runs/keras]

Run it again with the same ``--dir`` and it resumes from the checkpoint there, early stopping's
decision included: a run that stopped early stays stopped.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import hookbus
from hookbus.sinks import CheckpointSink, ConsoleSink, CSVSink, EarlyStoppingSink, TensorBoardSink

STEPS_PER_EPOCH = 16
BATCH = 32


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Three classes in 8 dimensions: class means on a simplex, unit Gaussian noise."""
    rng = np.random.default_rng(seed)
    means = np.random.default_rng(0).normal(scale=1.2, size=(3, 8))
    y = rng.integers(0, 3, size=n)
    x = means[y] + rng.normal(size=(n, 8))
    return x.astype("float32"), y.astype("int32")


def build_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(3)])
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def train(directory: str, epochs: int, *, resume: bool) -> tuple[int, str | None]:
    """One process's worth of training; returns the last step and why it stopped."""
    x, y = make_data(STEPS_PER_EPOCH * BATCH, seed=1)
    validation = make_data(256, seed=2)
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(run_name="keras classifier", plain_every_n_secs=2.0))
    bus.attach(TensorBoardSink(os.path.join(directory, "tb"), every_n_steps=8))
    bus.attach(CSVSink(os.path.join(directory, "metrics.csv"), every_n_steps=4))
    bus.attach(CSVSink(os.path.join(directory, "epochs.csv"), epochs=True, name="EpochCSV"))  # CSVLogger's rows
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt")))  # under fit: at each epoch end, as ModelCheckpoint
    bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=2, min_delta=0.001))
    callback = hookbus.EventBusCallback(bus, keys=["loss", "accuracy"], restore=resume)
    model = build_model()
    # Checkpoints fall on epoch ends, so the restored step tells the epoch to continue from.
    latest = tf.train.latest_checkpoint(os.path.join(directory, "ckpt"))
    initial_epoch = int(latest.rsplit("-", 1)[1]) // STEPS_PER_EPOCH if resume and latest else 0
    with bus:
        model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=initial_epoch + epochs,
            initial_epoch=initial_epoch,
            validation_data=validation,
            verbose=0,
            callbacks=[callback],
        )
    return callback.step, bus.stop_reason


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30, help="epochs per fit (default 30)")
    parser.add_argument("--dir", default="runs/keras", help="output directory (default runs/keras)")
    args = parser.parse_args(argv)
    directory = args.dir
    step, reason = train(directory, args.epochs, resume=False)
    print(f"first fit ended at step {step}: {reason}")
    # A second process would do exactly this after a crash or a preemption: restore and go on.
    step2, reason2 = train(directory, 2, resume=True)
    print(f"resumed fit continued from step {step} to step {step2}: {reason2}")
    print(f"outputs in {directory}: metrics.csv, epochs.csv, tb/, ckpt/")


if __name__ == "__main__":
    main()
