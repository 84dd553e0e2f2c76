"""The machine sampled beside real TensorFlow training: a Keras ``fit``, a TF1
``MonitoredTrainingSession`` and a hand-written loop each leave samples in the event log,
TensorBoard's ``system`` run and ``<stem>.system.csv``; an input pipeline that hangs (a
``tf.data`` map that waits) still gets samples, all at the step training stands at.

No sleeps and no timing: a stalled map waits for samples to arrive (a bound of a minute only
fails a broken build); a short run's samples come at least from the run's close.
"""

from __future__ import annotations

import csv
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _tb import runs

import hookbus
from hookbus.sink_api import Event
from hookbus.sinks import CSVSink, EventLogSink, TensorBoardSink

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

WAIT = 60.0  # bounds a failure only
THREAD = "hookbus-system-metrics"


class Seen:
    """Every sample and the thread it came on; :attr:`arrived` is notified at each."""

    def __init__(self) -> None:
        self.samples: list[tuple[Event, str]] = []
        self.arrived = threading.Condition()

    def __call__(self, event: Event) -> None:
        with self.arrived:
            self.samples.append((event, threading.current_thread().name))
            self.arrived.notify_all()


def _bus(tmp_path: Path, interval: float = 3600.0) -> tuple[hookbus.EventBus, Seen]:
    bus = hookbus.EventBus(system_metrics=interval)
    bus.attach(EventLogSink(tmp_path / "events.jsonl"))
    bus.attach(TensorBoardSink(tmp_path / "tb", system=True))
    bus.attach(CSVSink(tmp_path / "metrics.csv", system=True))
    seen = Seen()
    bus.on("system", seen)
    return bus, seen


def _check_views(tmp_path: Path, last_step: int) -> list[dict[str, Any]]:
    """Every view has the samples; the last one carries the run's last step. Returns the log's."""
    samples = [r for r in hookbus.read_event_log(tmp_path / "events.jsonl") if r["record"] == "system"]
    assert samples
    assert samples[-1]["step"] == last_step
    assert all(s["values"]["system/process_memory_rss_megabytes"] > 0 for s in samples)
    system = runs(tmp_path / "tb")["system"]
    seconds = {int(s["wall_time"]) for s in samples}  # samples within one second share a step
    assert sorted(system["system/process_memory_rss_megabytes"]) == sorted(seconds)
    with (tmp_path / "metrics.system.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [s["step"] for s in samples]
    return samples


def test_a_keras_fit_whose_input_hangs_is_still_sampled(tmp_path: Path) -> None:
    """A ``tf.data`` map hangs at one element until two samples came at the same step: it can only
    end because samples arrive while the training thread waits for its input."""
    bus, seen = _bus(tmp_path, interval=0.05)
    released = threading.Event()

    def stalled_seen() -> bool:  # the last two samples at one step: training stands still
        steps = [e.step for e, _ in seen.samples[-2:]]
        return len(steps) == 2 and steps[0] == steps[1]

    def hang(value: Any) -> Any:
        if int(value.numpy()) == 40 and not released.is_set():  # the sixth batch of the first epoch
            with seen.arrived:
                assert seen.arrived.wait_for(stalled_seen, WAIT), "no samples while the input hung"
            released.set()
        return value

    x = np.arange(64, dtype=np.float32)
    y = 2 * x.reshape(-1, 1)
    data = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .map(lambda a, b: (tf.py_function(hang, [a], tf.float32), b))
        .map(lambda a, b: (tf.reshape(a, [1]), b))
        .batch(8)
    )
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with bus:
        model.fit(data, epochs=2, verbose=0, shuffle=False, callbacks=[hookbus.EventBusCallback(bus)])
    assert released.is_set()
    steps = [e.step for e, _ in seen.samples]
    stalled = max(set(steps), key=steps.count)
    assert steps.count(stalled) >= 2  # samples while no step came
    assert {name for _, name in seen.samples} == {THREAD}
    samples = _check_views(tmp_path, last_step=16)
    assert sum(s["step"] == stalled for s in samples) >= 2


def test_a_tf1_monitored_session_is_sampled(tmp_path: Path, tf_graph: Any) -> None:
    from hookbus._cli._demo import build_linear_regression

    m = build_linear_regression()
    bus, seen = _bus(tmp_path)
    hook = hookbus.EventBusHook(bus, fetches={"loss": m.loss}, train_op=m.train_op)
    with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
        while not sess.should_stop() and bus.step < 30:
            sess.run(m.train_op)
    assert [name for _, name in seen.samples] == [THREAD]  # the run's last sample, off the training thread
    _check_views(tmp_path, last_step=30)


def test_a_loop_is_sampled(tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)
    x = tf.constant(np.arange(8, dtype=np.float32).reshape(-1, 1))

    @tf.function  # type: ignore[untyped-decorator]
    def train_step() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - 2 * x) ** 2)
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
        )
        return loss

    bus, seen = _bus(tmp_path)
    loop = hookbus.LoopPublisher(bus, keys=["loss"], step_counter=optimizer.iterations)
    with bus, loop:
        for _ in range(12):
            loop.step({"loss": train_step()})
    assert len(seen.samples) == 1
    _check_views(tmp_path, last_step=12)
