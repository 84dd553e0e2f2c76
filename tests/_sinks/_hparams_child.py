"""A Keras ``fit`` with ``TensorBoardSink(hparams=...)`` in both layouts, for the kill-and-resume test.

``python _hparams_child.py DIR [KILL_STEP]``: fits 3 epochs of 4 steps with validation, resuming
(``restore=True``) from ``DIR/ckpt`` (a checkpoint at each epoch's end), into
``DIR/default/trial`` (the default layout) and ``DIR/keras/trial`` (``layout="keras"``). With
``KILL_STEP`` the process SIGKILLs itself once the checkpoint at that step is saved. Prints
``resumed at step S`` when its first session restored a checkpoint.
"""

from __future__ import annotations

import os
import signal
import sys

HP: dict[str, bool | int | float | str] = {"lr": 0.1, "units": 8, "optimizer": "sgd", "batch_norm": False}


def main() -> None:
    directory = sys.argv[1]
    kill_step = int(sys.argv[2]) if len(sys.argv) > 2 else None

    import keras  # type: ignore[import-untyped]
    import numpy as np

    import hookbus
    from hookbus.sinks import CheckpointSink, TensorBoardSink

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    val_x = rng.normal(size=(16, 4)).astype("float32")
    val_y = (val_x[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="logits")])
    model.compile(
        optimizer=keras.optimizers.SGD(0.1, name="sgd"),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )

    bus = hookbus.EventBus()
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt"), every_n_steps=4, every_n_secs=None, keep=3))
    bus.attach(TensorBoardSink(os.path.join(directory, "default", "trial"), every_n_steps=1, hparams=HP))
    bus.attach(TensorBoardSink(os.path.join(directory, "keras", "trial"), layout="keras", hparams=HP, name="Keras"))
    if kill_step is not None:
        bus.on("checkpoint_saved", lambda e: os.kill(os.getpid(), signal.SIGKILL) if e.step == kill_step else None)
    bus.on("session_created", lambda e: print(f"resumed at step {e.step}", flush=True) if e.restored else None)
    callback = hookbus.EventBusCallback(bus, restore=True)
    with bus:
        model.fit(
            x,
            y,
            batch_size=16,
            epochs=3,
            shuffle=False,
            verbose=0,
            validation_data=(val_x, val_y),
            callbacks=[callback],
        )
    print(f"done at step {callback.step}", flush=True)


if __name__ == "__main__":
    main()
