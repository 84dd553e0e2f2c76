"""A Keras ``fit`` whose learning rate ReduceLROnPlateauSink steers, for the learning-rate kill test.

``python _rate_child.py DIR``: fits a small model for ``EPOCHS`` epochs of ``STEPS`` batches with
validation, resuming (``restore=True``) from ``DIR/ckpt``, with ``ReduceLROnPlateauSink`` on
``eval/loss``, ``CheckpointSink`` (each epoch end, as under ``fit`` by default) and a ``CSVSink``
writing the rate that trained every step. ``HOOKBUS_TEST_KILL=epoch_end:e`` makes the process
SIGKILL itself right after the bus's ``on_epoch_end`` of the 0-based epoch ``e`` (its checkpoint
saved, the rate the plateau decided there not yet applied); ``validation:e`` during that epoch's
validation. Prints each ``learning_rate_changed`` as ``change STEP OLD NEW``.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

STEPS = 4
EPOCHS = 8


def main() -> None:
    directory = sys.argv[1]
    phase, _, epoch_text = os.environ.get("HOOKBUS_TEST_KILL", "").partition(":")
    kill_epoch = int(epoch_text) if epoch_text else -1

    import keras  # type: ignore[import-untyped]
    import numpy as np

    import hookbus
    from hookbus.sinks import CheckpointSink, CSVSink, ReduceLROnPlateauSink

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    class Killer(keras.callbacks.Callback):  # type: ignore[misc]
        """After the EventBusCallback in the list: its on_epoch_end has run when this one runs."""

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
            if phase == "validation" and self.epoch == kill_epoch:
                die()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if phase == "epoch_end" and epoch == kill_epoch:
                die()

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * 32, 4)).astype("float32")
    y = ((x[:, 0] + rng.normal(scale=0.8, size=len(x))) > 0).astype("int32")
    val_x = rng.normal(size=(64, 4)).astype("float32")
    val_y = ((val_x[:, 0] + rng.normal(scale=0.8, size=64)) > 0).astype("int32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile(
        optimizer=keras.optimizers.SGD(0.5), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )

    bus = hookbus.EventBus()
    bus.attach(ReduceLROnPlateauSink(monitor="eval/loss", factor=0.5, patience=1, min_delta=0.01, cooldown=2))
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt"), keep=3))
    bus.attach(CSVSink(os.path.join(directory, "steps.csv"), keys=["learning_rate"], every_n_steps=1))
    bus.on("learning_rate_changed", lambda c: print(f"change {c.step} {c.old!r} {c.new!r}", flush=True))
    callback = hookbus.EventBusCallback(bus, keys=["loss", "learning_rate"], restore=True)
    with bus:
        model.fit(
            x,
            y,
            batch_size=32,
            epochs=EPOCHS,
            shuffle=False,
            verbose=0,
            validation_data=(val_x, val_y),
            callbacks=[callback, Killer()],
        )
    print(f"done at step {callback.step}", flush=True)


if __name__ == "__main__":
    main()
