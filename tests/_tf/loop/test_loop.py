"""LoopPublisher: schedules, conversion only on due steps, stop, eval, checkpoints and resume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import hookbus
from hookbus import Event, EventBus, LoopPublisher, UnknownKeyError
from hookbus.sinks import CSVSink, EarlyStoppingSink, StopAtStepSink


class Recorded:
    """A tensor stand-in that counts its conversions (``.numpy()``)."""

    conversions = 0

    def __init__(self, value: float) -> None:
        self.value = value

    def numpy(self) -> float:
        Recorded.conversions += 1
        return self.value


class Counter:
    """A step variable stand-in (``optimizer.iterations``)."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def numpy(self) -> int:
        return self.value


def test_values_are_converted_only_on_due_steps() -> None:
    bus = EventBus()
    got: list[tuple[int, dict[str, Any]]] = []
    bus.on("after_run", lambda e: got.append((e.step, dict(e.values))), every_n_steps=5, keys="loss")
    loop = LoopPublisher(bus, keys=["loss", "accuracy"])
    Recorded.conversions = 0
    calls: list[int] = []

    def lazy() -> dict[str, Any]:
        calls.append(loop.global_step)
        return {"loss": Recorded(2.0), "accuracy": Recorded(0.5)}

    with bus, loop:
        for step in range(1, 21):
            loop.step({"loss": Recorded(float(step)), "accuracy": Recorded(0.0)} if step <= 10 else lazy)
    assert [s for s, _ in got] == [5, 10, 15, 20]
    assert got[0] == (5, {"loss": 5.0})
    assert all(type(v["loss"]) is float for _, v in got)
    # Only the due subscriber's key, only on the 4 due steps: no conversion on the 16 quiet steps.
    assert Recorded.conversions == 4
    assert len(calls) == 2  # the callable form is called on due steps only


def test_step_counter_gives_the_step_and_survives_a_restart() -> None:
    bus = EventBus()
    steps: list[int] = []
    bus.on("after_run", lambda e: steps.append(e.step), every_n_steps=2)
    counter = Counter(40)  # a restored optimizer.iterations
    loop = LoopPublisher(bus, keys="loss", step_counter=counter)
    created: list[Event] = []
    bus.on("session_created", created.append)
    with bus, loop:
        for _ in range(5):
            counter.value += 1
            loop.step({"loss": 1.0})
    assert steps == [42, 44]
    assert created[0].step == 40
    assert created[0].restored


def test_stop_request_sets_should_stop_and_step_returns_it() -> None:
    bus = EventBus()
    bus.attach(StopAtStepSink(last_step=7))
    loop = LoopPublisher(bus, keys="loss")
    ran = 0
    with bus, loop:
        while not loop.should_stop:
            ran += 1
            stopped = loop.step({"loss": 1.0})
    assert ran == 7
    assert stopped
    assert bus.step == 7


def test_evaluate_publishes_eval_keys_and_early_stopping_acts_on_them(tmp_path: Path) -> None:
    bus = EventBus()
    stopper = bus.attach(EarlyStoppingSink("eval/loss", patience=1))
    bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=2))
    loop = LoopPublisher(bus, keys="loss", eval_keys=["loss"])
    losses = iter([3.0, 2.0, 2.5, 2.6, 1.0])
    with bus, loop:
        while not loop.should_stop:
            loop.step({"loss": Recorded(1.0)})
            if loop.global_step % 4 == 0:
                loop.evaluate({"loss": Recorded(next(losses))})
    assert stopper.stopped_at == 12  # evaluations at 4, 8, 12: 2.5 did not improve on 2.0
    rows = [line.split(",") for line in (tmp_path / "m.eval.csv").read_text().splitlines()]
    assert rows[0] == ["step", "wall_time", "loss"]
    assert [(r[0], r[2]) for r in rows[1:]] == [("4", "3.0"), ("8", "2.0"), ("12", "2.5")]


def test_bad_input_fails_before_training() -> None:
    bus = EventBus()
    with pytest.raises(ValueError, match="reserved"):
        LoopPublisher(bus, keys=["step"])
    with pytest.raises(TypeError, match="step_counter"):
        LoopPublisher(bus, keys="loss", step_counter=3)
    with pytest.raises(ValueError, match="needs checkpoint"):
        LoopPublisher(bus, keys="loss", restore=True)
    with pytest.raises(TypeError, match="tf.train.Checkpoint"):
        LoopPublisher(bus, keys="loss", checkpoint=object())
    loop = LoopPublisher(EventBus(), keys="loss")
    with pytest.raises(RuntimeError, match="eval_keys"):
        loop.evaluate({"loss": 1.0})
    bus = EventBus()
    bus.on("after_run", print, keys="acc")
    loop = LoopPublisher(bus, keys="loss")
    with pytest.raises(UnknownKeyError, match="'acc'"), bus, loop:
        pass
    bus = EventBus()
    bus.on("after_run", print)
    loop = LoopPublisher(bus, keys=["loss", "accuracy"])
    with pytest.raises(KeyError, match="accuracy"), bus, loop:
        loop.step({"loss": 1.0})


def test_checkpoints_through_the_users_tf_checkpoint_and_resumes(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    from hookbus.sinks import CheckpointSink

    def run(last_step: int) -> tuple[LoopPublisher, list[int]]:
        variable = tf.Variable(0.0)
        counter = tf.Variable(0, dtype=tf.int64)
        bus = EventBus()
        bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=4, every_n_secs=None))
        bus.attach(StopAtStepSink(last_step=last_step))
        bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=1))
        seen: list[int] = []
        bus.on("after_run", lambda e: seen.append(e.step), keys="loss")
        checkpoint = tf.train.Checkpoint(v=variable, step=counter)
        loop = LoopPublisher(bus, keys="loss", step_counter=counter, checkpoint=checkpoint, restore=True)
        with bus, loop:
            while not loop.should_stop:
                variable.assign_add(1.0)
                counter.assign_add(1)
                loop.step({"loss": variable})
        assert float(variable.numpy()) == last_step  # restored, then trained on
        return loop, seen

    first, seen = run(6)
    assert first.restored_from is None
    assert seen == list(range(1, 7))
    assert sorted(n for n in os.listdir(tmp_path / "ckpt") if n.endswith(".index")) == [
        "model.ckpt-4.index",
        "model.ckpt-6.index",
    ]
    second, seen = run(9)
    assert second.restored_from == str(tmp_path / "ckpt" / "model.ckpt-6")
    assert seen == [7, 8, 9]
    steps = [line.split(",")[0] for line in (tmp_path / "m.csv").read_text().splitlines()[1:]]
    assert steps == [str(s) for s in range(1, 10)]


def test_exported() -> None:
    assert hookbus.LoopPublisher is LoopPublisher


def test_a_call_running_several_optimizer_steps_is_numbered_by_the_step_counter(tmp_path: Path) -> None:
    """A tf.function with an inner loop runs 3 optimizer steps per call: steps come from the
    counter, so schedules fire where the step crosses their multiples (as in TF's own hooks)."""
    tf = pytest.importorskip("tensorflow")
    w = tf.Variable(5.0)
    optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function  # type: ignore[untyped-decorator]
    def three_steps() -> Any:
        for _ in tf.range(3):
            with tf.GradientTape() as tape:
                loss = tf.square(w - 1.0)
            optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    bus = EventBus()
    bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=5))
    loop = LoopPublisher(bus, keys="loss", step_counter=optimizer.iterations)
    with bus, loop:
        for _ in range(10):
            loss = three_steps()
            loop.step({"loss": loss})
    rows = (tmp_path / "m.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == [6, 12, 15, 21, 27, 30]
    assert bus.step == loop.global_step == int(optimizer.iterations.numpy()) == 30


def test_restore_best_puts_back_the_best_weights_of_a_custom_loop() -> None:
    """A hand-written eager loop gives its model's variables (``weights=``): early stopping keeps
    the weights of the best evaluation and puts them back when the loop ends."""
    tf = pytest.importorskip("tensorflow")
    kernel = tf.Variable([0.0, 0.0])
    step_counter = tf.Variable(0, dtype=tf.int64)
    bus = EventBus()
    stopper = bus.attach(EarlyStoppingSink("eval/loss", patience=2, min_delta=0.1, restore_best=True))
    loop = LoopPublisher(bus, keys="loss", eval_keys=["loss"], step_counter=step_counter, weights=[kernel])
    losses = iter([3.0, 2.0, 1.95, 2.5, 1.0])  # 1.95 is no improvement by min_delta: best is step 4
    with bus, loop:
        while not loop.should_stop:
            kernel.assign_add([1.0, -1.0])
            step_counter.assign_add(1)
            loop.step({"loss": 0.0})
            if loop.global_step % 2 == 0:
                loop.evaluate({"loss": next(losses)})
    assert stopper.stopped_at == 8
    assert stopper.state.best_step == 4
    assert kernel.numpy().tolist() == [4.0, -4.0]  # the weights of step 4, not 8's
    assert int(step_counter.numpy()) == 8  # weights only: the step stays
    with pytest.raises(TypeError, match="weights must be TensorFlow variables"):
        LoopPublisher(EventBus(), keys="loss", weights=[1.0])
