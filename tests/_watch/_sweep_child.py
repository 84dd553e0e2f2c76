"""One run of a sweep for tests/_watch/test_sweep_trainings.py: a small Keras fit, recorded by EventLogSink.

Usage: ``python tests/_watch/_sweep_child.py '<json>'`` with ``run`` (its directory), ``lr``, ``units``,
``steps`` (per epoch; two epochs), ``started`` (a file touched at its first step) and ``gate`` (a file):
until the gate exists, each step is paced (0.1 s), so the run is live and mid-way while the test looks
and kills; once it exists, the fit runs to its end at full speed. Every step is recorded.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(config: dict[str, object]) -> None:
    import keras  # type: ignore[import-untyped]  # Keras ships no type information
    import numpy as np
    import tensorflow as tf

    import hookbus
    from hookbus.sinks import EventLogSink

    run, started, gate = (Path(str(config[name])) for name in ("run", "started", "gate"))
    lr, units, steps = float(str(config["lr"])), int(str(config["units"])), int(str(config["steps"]))
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")

    class Pace(keras.callbacks.Callback):  # type: ignore[misc]  # Keras ships no type information
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            started.touch()
            if not gate.exists():
                time.sleep(0.1)

    bus = hookbus.EventBus()
    hparams: dict[str, float | int | str] = {"lr": lr, "units": units, "optimizer": "sgd"}
    bus.attach(EventLogSink(run / "events.jsonl", hparams=hparams, flush_secs=0.2))
    bus.on("after_run", every_n_steps=1)(lambda event: None)  # every step is due: every step is recorded
    with bus:
        model.fit(data, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[hookbus.EventBusCallback(bus), Pace()])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
