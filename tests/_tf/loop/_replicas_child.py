"""A custom loop under a real ``MirroredStrategy`` on two logical CPUs, for tests/_tf/loop/test_replicas.py.

Usage: ``python tests/_tf/loop/_replicas_child.py OUT``. Logical devices must be configured before
TensorFlow initializes its devices, so this runs in its own process. It trains a small Keras
regression with ``strategy.run`` (each replica its own half of every batch) and publishes what
``strategy.run`` returns (``PerReplica`` values) through ``LoopPublisher(strategy=...)``, in
four scenarios, and prints one line ``REPORT {...}`` with what each saw:

- ``nan``: replica 1 alone reports a NaN loss at step 4; ``NanGuardSink("loss")`` must stop
  there, and the CSV holds the means of steps 1-3. ``strategy.reduce(MEAN, ...)`` of the same
  values is recorded beside what the bus published, for the differential.
- ``quiet``: a CSV every 3 steps over 7 steps: how often the replicas' values were read; then one
  per-replica evaluation.
- ``no-strategy``: the same values to a publisher without ``strategy=``.
- ``multi-worker``: the converter told it runs under several workers.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _float(value: Any) -> float | str:
    if not isinstance(value, float):
        return type(value).__name__  # what a sink would have been handed instead of a number
    return value if math.isfinite(value) else repr(value)  # JSON has no NaN


def main(out: Path) -> None:
    import keras  # type: ignore[import-untyped]
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    import hookbus
    from hookbus.sinks import CSVSink, NanGuardSink

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.05)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.3).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)
    batches = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function  # type: ignore[untyped-decorator]
    def train_step(batch: Any, nan_at: Any) -> Any:
        def replica(features: Any, labels: Any) -> dict[str, Any]:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(features) - labels))
            variables = model.trainable_variables
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
            # The reported loss, not the trained one: replica 1 alone reports NaN at step nan_at.
            poisoned = tf.logical_and(tf.equal(optimizer.iterations, nan_at), tf.equal(replica_id, 1))
            reported = tf.where(poisoned, tf.constant(math.nan), loss)
            return {"loss": reported, "examples": tf.shape(features)[0]}

        return strategy.run(replica, args=batch)

    @tf.function  # type: ignore[untyped-decorator]
    def eval_step(batch: Any) -> Any:
        def replica(features: Any, labels: Any) -> Any:
            return tf.reduce_mean(tf.square(model(features) - labels))

        return strategy.run(replica, args=batch)

    report: dict[str, Any] = {"replicas": strategy.num_replicas_in_sync}

    # -- nan: the mean of every replica, a NaN on one of them caught at its step ---------------
    bus = hookbus.EventBus()
    bus.attach(NanGuardSink("loss"))
    bus.attach(CSVSink(out / "nan.csv", every_n_steps=1))
    published: list[dict[str, Any]] = []
    bus.on("after_run", lambda event: published.append({"step": event.step, **dict(event.values)}))
    loop = hookbus.LoopPublisher(bus, keys=["loss", "examples"], step_counter=optimizer.iterations, strategy=strategy)
    reduced: list[dict[str, Any]] = []
    kinds: list[str] = []
    try:
        with bus, loop:
            for _ in range(8):
                values = train_step(next(batches), tf.constant(4, tf.int64))
                kinds.append(type(values["loss"]).__name__)
                reduced.append(
                    {
                        "step": int(optimizer.iterations.numpy()),
                        **{
                            k: float(strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None))
                            for k, v in values.items()
                        },
                        "parts": [_float(float(p)) for p in strategy.experimental_local_results(values["loss"])],
                    }
                )
                if loop.step(values):
                    break
    except Exception as error:  # the NaN guard's NonFiniteError, reported to the test
        report["nan_error"] = [type(error).__name__, str(error)]
    report["kinds"] = sorted(set(kinds))
    report["published"] = [{k: (v if k == "step" else _float(v)) for k, v in p.items()} for p in published]
    report["reduced"] = [{k: (_float(v) if isinstance(v, float) else v) for k, v in r.items()} for r in reduced]
    report["csv"] = (out / "nan.csv").read_text()

    # -- quiet: replicas' values are read on due steps only ---------------------------------------
    reads = {"n": 0}
    read_results = strategy.experimental_local_results

    def counted(value: Any) -> Any:
        reads["n"] += 1
        return read_results(value)

    strategy.experimental_local_results = counted
    bus = hookbus.EventBus()
    bus.attach(CSVSink(out / "quiet.csv", every_n_steps=3, keys=["loss"]))
    evaluations: list[Any] = []
    bus.on("after_run", lambda event: evaluations.append(dict(event.values)), keys=["eval/loss"])
    loop = hookbus.LoopPublisher(
        bus, keys=["loss"], eval_keys=["loss"], step_counter=optimizer.iterations, strategy=strategy
    )
    start = int(optimizer.iterations.numpy())
    with bus, loop:
        for _ in range(7):
            loop.step(train_step(next(batches), tf.constant(-1, tf.int64)))
        strategy.experimental_local_results = read_results  # the evaluation below is not counted
        evaluated = eval_step(next(batches))  # one value per replica
        loop.evaluate({"loss": evaluated})
    report["quiet"] = {"start": start, "end": int(optimizer.iterations.numpy()), "reads": reads["n"]}
    report["evaluation"] = {
        "kind": type(evaluated).__name__,
        "published": [{k: _float(v) for k, v in e.items()} for e in evaluations],
        "reduced": float(strategy.reduce(tf.distribute.ReduceOp.MEAN, evaluated, axis=None)),
    }

    # -- no-strategy, multi-worker: refused at the first due step, naming strategy.reduce ------
    values = train_step(next(batches), tf.constant(-1, tf.int64))
    bus = hookbus.EventBus()
    bus.attach(CSVSink(out / "refused.csv", every_n_steps=1))
    loop = hookbus.LoopPublisher(bus, keys=["loss"])
    try:
        with bus, loop:
            loop.step(values)
    except TypeError as error:
        report["no_strategy"] = {"error": str(error), "bus_step": bus.step}
    try:
        from hookbus._tf.loop._replicas import ReplicaValues

        several = ReplicaValues(strategy)
        several.multi_worker = True
        several.convert("loss", values["loss"], 7)
    except (ImportError, TypeError) as error:
        report["multi_worker"] = f"{type(error).__name__}: {error}"
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
