"""Examples trained and the time outside the steps, from all three publishers, on real trainings.

Examples are checked against the data set's known size (counts, never timing); the time outside
the steps against a subscriber that sleeps a known time at every step: a lower bound, which a loaded
machine can only exceed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import hookbus  # noqa: E402 - after the importorskip
from hookbus import Event, EventBus  # noqa: E402
from hookbus._cli._demo import build_linear_regression  # noqa: E402

SLEEP = 0.05  # what the slow subscriber sleeps at each step


def xy(n: int) -> tuple[Any, Any]:
    x = np.random.default_rng(0).normal(size=(n, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def small_model() -> Any:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


def recorder(bus: EventBus, **schedule: Any) -> list[Event]:
    events: list[Event] = []
    bus.on("after_run", events.append, keys="loss", **schedule)
    return events


def sleeper(bus: EventBus) -> None:
    bus.on("after_run", lambda event: time.sleep(SLEEP), keys="loss", every_n_steps=1)


def outside_per_step(events: list[Event]) -> float:
    """The time outside per step over the span the events cover (their first to their last)."""
    first, last = events[0], events[-1]
    assert first.outside_secs is not None
    assert last.outside_secs is not None
    return (last.outside_secs - first.outside_secs) / (last.step - first.step)


# -- Keras fit ------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [None, 32])
def test_keras_counts_a_short_last_batch_by_what_it_holds(batch_size: int | None) -> None:
    # 100 examples in batches of 32: 32, 32, 32, 4 per epoch. Every step is published.
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=1)
    callback = hookbus.EventBusCallback(bus, batch_size=batch_size)
    with bus:
        small_model().fit(*xy(100), batch_size=32, epochs=3, verbose=0, shuffle=False, callbacks=[callback])
    assert [e.step for e in events] == list(range(1, 13))
    expected = [epoch * 100 + min(batch * 32, 100) for epoch in range(3) for batch in range(1, 5)]
    assert [e.examples for e in events] == expected


def test_keras_counts_examples_on_due_steps_only() -> None:
    # Published every 5 steps across epochs of 4 batches: the count is right at every due step, the
    # epochs' short last batches counted between them; the validation's 20 examples (which Keras's loss
    # tracker counts after the epoch's) are no training.
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=5)
    with bus:
        small_model().fit(
            *xy(100),
            batch_size=32,
            epochs=5,
            verbose=0,
            validation_data=xy(20),
            callbacks=[hookbus.EventBusCallback(bus)],
        )
    assert [(e.step, e.examples) for e in events] == [(5, 132), (10, 264), (15, 396), (20, 500)]


def test_keras_time_outside_shows_a_slow_subscriber() -> None:
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=1)
    sleeper(bus)
    with bus:
        small_model().fit(*xy(64), batch_size=8, epochs=1, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])
    assert outside_per_step(events) >= 0.8 * SLEEP


def test_keras_bad_batch_size_fails_at_construction() -> None:
    with pytest.raises(ValueError, match=r"batch_size must be a positive int or None \(got 0\)"):
        hookbus.EventBusCallback(EventBus(), batch_size=0)


# -- the TF1 hook under MonitoredTrainingSession --------------------------------------------------------
def train_hook(bus: EventBus, hook_kwargs: dict[str, Any], *, n: int, batch: int, drop_remainder: bool) -> None:
    with tf.Graph().as_default():
        x, y = xy(n)
        data = tf.compat.v1.data.make_one_shot_iterator(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=drop_remainder)
        )
        features, labels = data.get_next()
        weights = tf.compat.v1.get_variable("w", [3, 1], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(features, weights) - labels))
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
        hook = hookbus.EventBusHook(bus, {"loss": loss}, train_op=train_op, **hook_kwargs)
        with bus, hookbus.monitored_training_session(hooks=[hook]) as session:
            while not session.should_stop():
                session.run(train_op)


def test_hook_reads_the_batch_size_from_a_static_input() -> None:
    # 100 examples in batches of 16, the remainder dropped: 6 steps of 16, the iterator's static shape.
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=2)
    train_hook(bus, {}, n=100, batch=16, drop_remainder=True)
    assert [(e.step, e.examples) for e in events] == [(2, 32), (4, 64), (6, 96)]


def test_hook_counts_a_declared_batch_size() -> None:
    # A last batch of unknown size (drop_remainder=False): nothing is guessed, a declared size is counted.
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=3)
    train_hook(bus, {}, n=96, batch=16, drop_remainder=False)
    assert [e.examples for e in events] == [None, None]
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=3)
    train_hook(bus, {"batch_size": 16}, n=96, batch=16, drop_remainder=False)
    assert [(e.step, e.examples) for e in events] == [(3, 48), (6, 96)]


def test_hook_time_outside_shows_a_slow_subscriber() -> None:
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=1)
    sleeper(bus)
    with tf.Graph().as_default():
        m = build_linear_regression()
        hook = hookbus.EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook]) as session:
            for _ in range(8):
                session.run(m.train_op)
    assert outside_per_step(events) >= 0.8 * SLEEP


def test_hook_bad_batch_size_fails_at_construction() -> None:
    with tf.Graph().as_default():
        loss = tf.constant(1.0)
        with pytest.raises(ValueError, match=r"batch_size must be a positive int \(got -1\)"):
            hookbus.EventBusHook(EventBus(), {"loss": loss}, batch_size=-1)


# -- a hand-written loop --------------------------------------------------------------------------
def train_loop(bus: EventBus, loop: hookbus.LoopPublisher, *, n: int, batch: int, mark_start: bool = False) -> None:
    model = small_model()
    optimizer = keras.optimizers.SGD(0.01)
    x, y = xy(n)

    @tf.function  # type: ignore[untyped-decorator]
    def train_step(xb: Any, yb: Any) -> dict[str, Any]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb) - yb))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
        )
        return {"loss": loss}

    with bus, loop:
        for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(batch):
            if mark_start:
                loop.step_begins()
            loop.step(train_step(xb, yb), examples=int(xb.shape[0]))


def test_loop_counts_a_short_last_batch_it_is_told_of() -> None:
    # 100 examples in batches of 32: the last step says it held 4.
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=1)
    train_loop(bus, hookbus.LoopPublisher(bus, keys=["loss"], batch_size=32), n=100, batch=32)
    assert [(e.step, e.examples) for e in events] == [(1, 32), (2, 64), (3, 96), (4, 100)]


def test_loop_without_a_batch_size_counts_nothing() -> None:
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=1)
    loop = hookbus.LoopPublisher(bus, keys=["loss"])
    with bus, loop:
        loop.step({"loss": 1.0})
        with pytest.raises(ValueError, match=r"step\(examples=4\) counts a short batch against"):
            loop.step({"loss": 1.0}, examples=4)
    assert [e.examples for e in events] == [None]


@pytest.mark.parametrize("mark_start", [False, True])
def test_loop_time_outside_shows_a_slow_subscriber(mark_start: bool) -> None:
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=1)
    sleeper(bus)
    train_loop(bus, hookbus.LoopPublisher(bus, keys=["loss"], batch_size=8), n=64, batch=8, mark_start=mark_start)
    assert outside_per_step(events) >= 0.8 * SLEEP


def test_loop_bad_batch_size_fails_at_construction() -> None:
    with pytest.raises(ValueError, match=r"batch_size must be a positive int or None \(got 2.5\)"):
        hookbus.LoopPublisher(EventBus(), keys=["loss"], batch_size=2.5)  # type: ignore[arg-type]


# -- the views --------------------------------------------------------------------------------------
def test_tensorboard_writes_examples_per_second_that_add_up_to_the_data_set(tmp_path: Any) -> None:
    # A Keras fit over 100 examples (batches of 32, a last one of 4), 3 epochs, TensorBoard every 2 steps:
    # each point's examples/sec times the wall seconds since the one before is the examples trained between
    # them, 2 batches' worth (a last batch counted as its 4); all of them together, 300 less the first span's.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from hookbus.sinks import TensorBoardSink

    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=2)
    bus.attach(TensorBoardSink(str(tmp_path), every_n_steps=2))
    with bus:
        small_model().fit(*xy(100), batch_size=32, epochs=3, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])
    accumulator = EventAccumulator(str(tmp_path / "train"))
    accumulator.Reload()
    assert {"examples/sec", "outside_secs/step", "steps/sec"} <= set(accumulator.Tags()["scalars"])
    walls = {e.step: e.wall_time for e in events}
    examples = {e.step: e.examples or 0 for e in events}
    rates = [(e.step, e.value) for e in accumulator.Scalars("examples/sec")]
    assert [step for step, _ in rates] == [2, 4, 6, 8, 10, 12]  # the first from the session's start at 0
    previous_step, previous_examples = 0, 0
    for step, rate in rates:
        span = walls[step] - (walls[previous_step] if previous_step else accumulator.FirstEventTimestamp())
        if previous_step:
            assert rate * span == pytest.approx(examples[step] - previous_examples, rel=1e-3)
        previous_step, previous_examples = step, examples[step]
    assert [examples[s] for s in (2, 4, 6, 8, 10, 12)] == [64, 100, 164, 200, 264, 300]


def test_the_event_log_keeps_the_figures_and_a_replay_publishes_them_as_recorded(tmp_path: Any) -> None:
    # What hookbus watch's dashboard shows is a replay of the log through a ConsoleSink: the replayed events
    # carry the figures the training measured, not the replaying process's clock.
    import io

    from rich.console import Console

    from hookbus.sinks import ConsoleSink, EventLogSink

    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=1)
    sleeper(bus)
    bus.attach(EventLogSink(tmp_path / "run.jsonl", every_n_steps=1))
    with bus:
        small_model().fit(*xy(100), batch_size=32, epochs=2, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])
    steps = [r for r in hookbus.read_event_log(tmp_path / "run.jsonl") if r["record"] == "step"]
    recorded = [(r["step"], r.get("trained_examples"), r.get("outside_secs")) for r in steps]
    assert recorded == [(e.step, e.examples, e.outside_secs) for e in events]
    assert [examples for _, examples, _ in recorded] == [32, 64, 96, 100, 132, 164, 196, 200]
    assert all("trained_examples" not in r["values"] for r in steps)  # fields, not values

    again = EventBus(system_metrics=False)
    replayed = recorder(again, every_n_steps=1)
    console = Console(file=io.StringIO(), width=200)
    again.attach(ConsoleSink(console, live=False, every_n_steps=1, plain_every_n_secs=0))
    hookbus.replay(tmp_path / "run.jsonl", again)
    assert [(e.step, e.examples, e.outside_secs) for e in replayed] == recorded
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert any(" examples/s | outside " in line for line in lines)


def test_a_slow_loop_shows_outside_the_steps_on_quiet_steps_too() -> None:
    # The loop takes 20 ms of its own between two steps; the subscriber is due every 5th step only, so 4
    # steps in 5 are quiet and read no clock: their time outside is the sample taken after each due step.
    bus = EventBus(system_metrics=False)
    events = recorder(bus, every_n_steps=5)
    loop = hookbus.LoopPublisher(bus, keys=["loss"], batch_size=4)
    with bus, loop:
        for _ in range(30):
            time.sleep(0.02)  # the loop's own work: preparing the next batch
            loop.step_begins()
            loop.step({"loss": 1.0})
    assert [e.step for e in events] == [5, 10, 15, 20, 25, 30]
    assert [e.examples for e in events] == [20, 40, 60, 80, 100, 120]
    assert outside_per_step(events[1:]) >= 0.8 * 0.02
