"""One worker of a local two-worker MultiWorkerMirroredStrategy cluster that profiles (for
tests/_sinks/test_profiler.py).

Usage: ``python tests/_sinks/_profiler_child.py '<json>'`` with ``cluster``, ``index`` and ``out``. Both
workers train the same steps in lockstep (so their windows fall in the same second) on one host,
with a ``ProfilerSink`` writing into the same logdir, and print one ``REPORT {...}`` line with the
traces saved.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path: tests/ in its place, for the helpers
# the children share (and tests/_sinks/mlflow/ must not shadow MLflow).
sys.path[0] = str(Path(__file__).resolve().parents[1])

from _mwms_step import mse_train_step, unsharded_batches  # noqa: E402 - after the path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(config: dict[str, Any]) -> None:
    index, out = int(config["index"]), Path(config["out"])
    os.environ["TF_CONFIG"] = json.dumps({"cluster": config["cluster"], "task": {"type": "worker", "index": index}})
    import keras  # type: ignore[import-untyped]
    import numpy as np
    import tensorflow as tf

    import hookbus
    from hookbus.sinks import ProfilerSink

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.01)
        optimizer.build(model.trainable_variables)
    x = np.ones((64, 4), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).repeat().batch(8)
    batches = unsharded_batches(tf, strategy, data)
    train_step = mse_train_step(tf, strategy, model, optimizer)

    bus = hookbus.EventBus()
    sink = bus.attach(ProfilerSink(out / "tb", start_step=3, num_steps=3))
    loop = hookbus.LoopPublisher(bus, ["loss"], step_counter=optimizer.iterations, strategy=strategy)
    with bus, loop:
        for _ in range(8):
            loop.step(train_step(batches))
    saved, skipped = list(sink.report.saved), list(sink.report.skipped)
    report = {"index": index, "step": loop.global_step, "saved": saved, "skipped": skipped}
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
