"""A Keras ``fit`` for the epoch-end kill tests: every writing sink, checkpoints at epoch ends.

``python _keras_child.py DIR``; fits a small model for ``EPOCHS`` epochs of ``STEPS`` batches
with validation, resuming (``restore=True``) from ``DIR/ckpt``, with ``CSVSink`` (steps, and a
second one with ``epochs=True``), ``EventLogSink``, ``TensorBoardSink`` and
``CheckpointSink(every_n_steps=STEPS)``. The writers flush only every minute, so what reaches
the disk is what the checkpoint barrier and the close flushed.

``HOOKBUS_TEST_KILL=phase:epoch[:ms]`` makes the process SIGKILL itself around the end of the
0-based ``epoch``:

- ``validation:e``: during that epoch's validation (after its last batch, before its end);
- ``epoch_end:e:ms``: ``ms`` milliseconds after its ``on_epoch_end`` (0: in it, right after
  the callback's), from another thread, while the next epoch trains (at the latest at that
  epoch's last batch, before its save, should the timer run late);
- ``saved:e``: in the ``checkpoint_saved`` subscriber of the save at that epoch's last step.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

STEPS = 6
EPOCHS = 6


def main() -> None:
    directory = sys.argv[1]
    phase, _, rest = os.environ.get("HOOKBUS_TEST_KILL", "").partition(":")
    epoch_text, _, ms_text = rest.partition(":")
    kill_epoch = int(epoch_text) if epoch_text else -1
    delay = int(ms_text) / 1000 if ms_text else 0.0

    import keras  # type: ignore[import-untyped]
    import numpy as np

    import hookbus
    from hookbus.sinks import CheckpointSink, CSVSink, EventLogSink, TensorBoardSink

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    class Killer(keras.callbacks.Callback):  # type: ignore[misc]
        """After the EventBusCallback in the list: its on_epoch_end has run when this one runs."""

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            time.sleep(0.02)  # slow enough for a timer to land in the next epoch
            if phase == "epoch_end" and self.epoch == kill_epoch + 1 and batch == STEPS - 1:
                # A timer the loaded machine ran late still kills within the next epoch: here, at
                # its last batch, before that batch's save (which waits for Keras to move on).
                die()

        def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
            if phase == "validation" and self.epoch == kill_epoch:
                die()

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if phase == "epoch_end" and epoch == kill_epoch:
                if delay == 0:
                    die()
                timer = threading.Timer(delay, die)
                timer.daemon = True
                timer.start()

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * 8, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    val_x = rng.normal(size=(16, 4)).astype("float32")
    val_y = (val_x[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    bus = hookbus.EventBus()
    slow = 60.0  # seconds between flushes: the disk gets what the barrier and the close flushed
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt"), every_n_steps=STEPS, every_n_secs=None, keep=3))
    bus.attach(CSVSink(os.path.join(directory, "steps.csv"), every_n_steps=1, flush_secs=slow))
    bus.attach(CSVSink(os.path.join(directory, "epochs.csv"), epochs=True, name="EpochCSV", flush_secs=slow))
    bus.attach(EventLogSink(os.path.join(directory, "events.jsonl"), flush_secs=slow))
    bus.attach(TensorBoardSink(os.path.join(directory, "tb"), every_n_steps=1, flush_secs=slow))
    if phase == "saved":
        bus.on("checkpoint_saved", lambda e: die() if e.step == (kill_epoch + 1) * STEPS else None)
    callback = hookbus.EventBusCallback(bus, restore=True)
    with bus:
        model.fit(
            x,
            y,
            batch_size=8,
            epochs=EPOCHS,
            shuffle=False,
            verbose=0,
            validation_data=(val_x, val_y),
            callbacks=[callback, Killer()],
        )
    print(f"done at step {callback.step}", flush=True)


if __name__ == "__main__":
    main()
