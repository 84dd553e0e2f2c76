"""One worker of a local MultiWorkerMirroredStrategy cluster, for tests/_tf/test_collective.py.

Usage: ``python tests/_tf/_mwms_child.py '<json>'`` with ``cluster`` (``{"worker": [...]}``),
``index``, ``scenario`` (``loop``, ``keras`` or ``one-worker``), ``out`` (the shared output
directory), ``stop_at`` (the step at which worker 1 alone asks to stop) and ``rate_at`` (the step
at which worker 1 alone asks for a tenth of the learning rate). The worker trains a small
regression until hookbus stops it and prints one JSON line (``REPORT {...}``) saying how it
ended, with the learning rate it published at every step.

``one-worker`` runs Keras's ``fit`` under a real one-worker strategy (its all-reduces are real)
with the callback's task forced to a collective one, since a two-worker ``fit`` fails inside
Keras; it runs in its own process because TensorFlow configures collectives once, at startup.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path: tests/ in its place, for the helpers
# the children share (and tests/_tf/keras/ must not shadow Keras).
sys.path[0] = str(Path(__file__).resolve().parents[1])

from _mwms_step import mse_train_step, unsharded_batches  # noqa: E402 - after the path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(config: dict[str, Any]) -> None:
    faulthandler.dump_traceback_later(float(config.get("dump_after", 60)), exit=False)
    index, scenario, out = int(config["index"]), config["scenario"], Path(config["out"])
    os.environ["TF_CONFIG"] = json.dumps({"cluster": config["cluster"], "task": {"type": "worker", "index": index}})
    import keras  # type: ignore[import-untyped]
    import numpy as np
    import tensorflow as tf

    import hookbus
    from hookbus.sinks import CheckpointSink, CSVSink, EventLogSink, NanGuardSink, TensorBoardSink

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if scenario == "one-worker":
        _one_worker(tf, keras, strategy, out, config["stop_at"], int(config.get("rate_at", 0)))
        return
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.01)
    rng = np.random.default_rng(index)  # each worker reads its own shard
    x = rng.normal(size=(512, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)

    bus = hookbus.EventBus()
    bus.attach(NanGuardSink("loss"))
    bus.attach(CSVSink(out / "metrics.csv", every_n_steps=5))
    bus.attach(TensorBoardSink(out / "tb", every_n_steps=5))
    bus.attach(CheckpointSink(out / "ckpt", every_n_steps=10, every_n_secs=None, keep=2))
    bus.attach(CSVSink(out / "each.csv", every_n_steps=5, runs_on="each"))
    bus.attach(EventLogSink(out / "events.jsonl", runs_on="each"))  # what `hookbus watch` reads (each machine)
    seen: dict[str, Any] = {"steps": []}
    steer = bus.attach(_steer(index == 1, int(config.get("rate_at", 0))))

    @bus.on("after_run")
    def record(event: Any) -> None:
        seen["steps"].append(event.step)
        seen.update(task=[event.task_type, event.task_index], local_step=event.local_step)
        if index == 1 and event.step >= config["stop_at"]:
            event.request_stop(f"worker 1 asked at step {event.step}")

    @bus.on("stop_requested")
    def stopped(request: Any) -> None:
        seen.setdefault("stop_source", request.source)
        seen.setdefault("stop_step", request.step)

    saved: list[str] = []
    error = None
    try:
        if scenario == "loop":
            step = _loop(tf, strategy, model, optimizer, x, y, bus, saved)
        else:
            step = _keras(tf, keras, strategy, model, optimizer, x, y, bus, saved)
    except Exception as caught:
        error = f"{type(caught).__name__}: {caught}"[:2000]
        step = None
    report = {"index": index, "step": step, "stop_reason": bus.stop_reason, "error": error, "saved": saved, **seen}
    weights = [np.asarray(w).tolist() for w in model.get_weights()]
    report.update(rates=steer.seen, changes=steer.changes, weights=weights)
    print("REPORT " + json.dumps(report), flush=True)


def _steer(asks: bool, at: int) -> Any:
    """A sink recording the published rate at every step; where it ``asks`` (worker 1 alone), at
    step ``at``, it asks for a tenth of it."""
    from hookbus.sink_api import Schedule, Sink, require_learning_rate

    class Steer(Sink):
        default_schedule = Schedule(every_n_steps=1)

        def __init__(self) -> None:
            super().__init__(keys=["learning_rate"], on_error="raise")
            self.seen: list[list[float]] = []
            self.changes: list[list[Any]] = []

        def setup(self, context: Any) -> None:
            super().setup(context)
            self.rate = require_learning_rate(context, "Steer")

        def on_after_run(self, event: Any) -> None:
            self.seen.append([event.step, event.values["learning_rate"]])
            if asks and event.step == at:
                self.rate.request(rate=self.rate.rate / 10, reason=f"worker 1 at step {at}")

        def on_learning_rate_changed(self, event: Any) -> None:
            self.changes.append([event.step, event.old, event.new, event.source, event.reason])

    return Steer()


def _one_worker(tf: Any, keras: Any, strategy: Any, out: Path, stop_at: int, rate_at: int) -> None:
    import numpy as np

    import hookbus
    import hookbus._tf.keras._callback
    from hookbus._tf._collective import task_of_strategy
    from hookbus.sinks import CheckpointSink

    alone = task_of_strategy(strategy)  # one worker: one machine
    hookbus._tf.keras._callback.task_of_strategy = lambda s: hookbus.Task("worker", 0, collective=True)  # type: ignore[attr-defined,assignment]
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    bus = hookbus.EventBus()
    bus.attach(CheckpointSink(out / "ckpt", every_n_steps=10, every_n_secs=None))
    steer = bus.attach(_steer(True, rate_at))
    asked: list[int] = []

    @bus.on("after_run")
    def ask(event: Any) -> None:
        if event.step == stop_at:
            asked.append(event.step)
            event.request_stop(f"asked at {stop_at}")

    x = np.ones((16 * 8, 4), "float32")
    callback = hookbus.EventBusCallback(bus, ["loss", "learning_rate"], check_stop_every_n_steps=5)
    with bus:
        model.fit(x, x.sum(axis=1), batch_size=16, epochs=20, verbose=0, callbacks=[callback])
    report = {
        "alone_task": None if alone is None else repr(alone),
        "asked": asked,
        "step": int(model.optimizer.iterations.numpy()),
        "saved": sorted(p.name for p in (out / "ckpt").glob("*.index")),
        "rates": steer.seen,
        "changes": steer.changes,
    }
    print("REPORT " + json.dumps(report), flush=True)


def _recording(backend: Any, saved: list[str]) -> None:
    """Record every path the publisher's checkpoint backend writes (and still write it)."""
    save = backend.save

    def recorded(path: str) -> str:
        saved.append(path)
        return str(save(path))

    backend.save = recorded


def _loop(tf: Any, strategy: Any, model: Any, optimizer: Any, x: Any, y: Any, bus: Any, saved: list[str]) -> int:
    import hookbus

    with strategy.scope():
        optimizer.build(model.trainable_variables)
    batches = unsharded_batches(tf, strategy, tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16))
    train_step = mse_train_step(tf, strategy, model, optimizer)

    loop = hookbus.LoopPublisher(
        bus,
        ["loss"],
        step_counter=optimizer.iterations,
        strategy=strategy,
        learning_rate=optimizer.learning_rate,
        checkpoint=tf.train.Checkpoint(model=model, optimizer=optimizer),
        restore=True,
    )
    assert loop.checkpoint_backend is not None
    _recording(loop.checkpoint_backend, saved)
    with bus, loop:
        for _ in range(500):  # a bound: a stop that never comes fails the test, it does not hang it
            if loop.step(train_step(batches)):
                break
    return loop.global_step


def _keras(
    tf: Any, keras: Any, strategy: Any, model: Any, optimizer: Any, x: Any, y: Any, bus: Any, saved: list[str]
) -> int:
    import hookbus

    with strategy.scope():
        model.compile(optimizer=optimizer, loss="mse")
    callback = hookbus.EventBusCallback(bus, ["loss", "learning_rate"])
    _recording(callback.checkpoint_backend, saved)
    with bus:
        model.fit(x, y, batch_size=16, epochs=20, verbose=0, callbacks=[callback])
    return int(optimizer.iterations.numpy())


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
