"""Issue 27: the learning rate on the publisher side, one machine.

Each publisher offers the rate it trains with (``SinkContext.learning_rate``), publishes it as
the key ``learning_rate`` at the step it trained, and applies a sink's request before the next
step, publishing ``learning_rate_changed``. Each test is differential: the same training run
with the change written into the model by hand (TensorFlow's or Keras's own schedule) ends with
the same weights, so the rate the sinks were shown is the rate the optimizer used.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hookbus
from hookbus.sink_api import LearningRate, LearningRateChange, Schedule, Sink, require_learning_rate

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
v1 = tf.compat.v1

STEPS, AT, FACTOR = 8, 5, 0.1


class Steer(Sink):
    """Records the published rate every step; at step ``AT`` asks for ``FACTOR`` times it."""

    default_schedule = Schedule(every_n_steps=1)

    def __init__(self, *, by_rate: bool = False, keys: str | list[str] = "learning_rate") -> None:
        super().__init__(keys=keys, on_error="raise")
        self.by_rate = by_rate
        self.seen: list[tuple[int, float]] = []
        self.changes: list[LearningRateChange] = []
        self.rate: LearningRate | None = None

    def setup(self, context: Any) -> None:
        super().setup(context)
        self.rate = require_learning_rate(context, "Steer")

    def on_after_run(self, event: hookbus.Event) -> None:
        self.seen.append((event.step, event.values["learning_rate"]))
        if event.step == AT:
            assert self.rate is not None
            if self.rate.scheduled and not self.by_rate:
                self.rate.request(multiplier=FACTOR, reason="test: step 5")
            else:
                self.rate.request(rate=self.rate.rate * FACTOR, reason="test: step 5")

    def on_learning_rate_changed(self, event: LearningRateChange) -> None:
        self.changes.append(event)


def _tf1_run(scheduled: bool, *, hooked: bool) -> tuple[float, Steer]:
    """Train w² for STEPS steps; ``hooked``: hookbus steers the rate, else the graph does by hand."""
    graph = tf.Graph()
    steer = Steer()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.Variable(1.0)
        later = tf.where(step >= AT, FACTOR, 1.0)  # the change, written into the graph by hand
        if scheduled:
            rate: Any = v1.train.exponential_decay(0.1, step, 10, 0.5)
            used = rate if hooked else rate * later
        else:
            rate = used = v1.Variable(0.1, trainable=False)
        train_op = v1.train.GradientDescentOptimizer(used).minimize(w * w, global_step=step)
        if not hooked and not scheduled:
            with tf.control_dependencies([train_op]):
                train_op = v1.assign(rate, 0.1 * tf.where(step >= AT, FACTOR, 1.0)).op
        bus = hookbus.EventBus()
        hooks = []
        if hooked:
            bus.attach(steer)
            hooks = [hookbus.EventBusHook(bus, {"loss": w * w}, train_op=train_op, learning_rate=rate)]
        with bus, hookbus.monitored_training_session(hooks=hooks) as session:
            for _ in range(STEPS):
                session.run(train_op)
            final = float(session.run(w))
    return final, steer


@pytest.mark.parametrize("scheduled", [True, False], ids=["schedule-tensor", "rate-variable"])
def test_the_tf1_hook_applies_a_request_before_the_next_step_as_the_graph_would(scheduled: bool) -> None:
    """A rate tensor gets hookbus's multiplier (its consumers moved onto rate × multiplier in
    begin), a rate variable its assign op: either way step AT + 1 trains with the new rate, and
    the weights are those of the same graph with the change written in by hand."""
    final, steer = _tf1_run(scheduled, hooked=True)
    reference, _ = _tf1_run(scheduled, hooked=False)
    np.testing.assert_allclose(final, reference, rtol=1e-6)
    rates = dict(steer.seen)
    assert sorted(rates) == list(range(1, STEPS + 1))
    expected = [0.1 * (0.5 ** ((s - 1) / 10) if scheduled else 1.0) * (FACTOR if s > AT else 1.0) for s in rates]
    np.testing.assert_allclose([rates[s] for s in sorted(rates)], expected, rtol=1e-6)
    [change] = steer.changes
    assert (change.step, change.reason, change.source) == (AT, "test: step 5", "Steer")
    assert change.multiplier == pytest.approx(FACTOR if scheduled else 1.0)
    assert change.new == pytest.approx(change.old * FACTOR, rel=1e-6)


def _keras_run(scheduled: bool, *, hooked: bool, by_rate: bool = False) -> tuple[list[Any], Steer]:
    keras.utils.set_random_seed(3)
    x = np.random.default_rng(0).random((32, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    if scheduled:
        base = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
        rate: Any = base if hooked else _Later(base)
    else:  # Keras's own piecewise schedule: iterations >= AT trains with the new rate
        rate = 0.1 if hooked else keras.optimizers.schedules.PiecewiseConstantDecay([AT - 1], [0.1, 0.1 * FACTOR])
    model.compile(optimizer=keras.optimizers.SGD(rate), loss="mse")
    steer = Steer(by_rate=by_rate)
    bus = hookbus.EventBus()
    callbacks = []
    if hooked:
        bus.attach(steer)
        callbacks = [hookbus.EventBusCallback(bus, keys=["loss", "learning_rate"])]
    with bus:
        model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    return model.get_weights(), steer


class _Later(keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[misc, name-defined]
    """The reference: a schedule times FACTOR from iteration AT on (step AT + 1)."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __call__(self, step: Any) -> Any:
        return self.base(step) * tf.where(step >= AT, FACTOR, 1.0)


@pytest.mark.parametrize("scheduled", [True, False], ids=["schedule", "float-rate"])
def test_the_keras_callback_steers_the_optimizer_as_a_keras_schedule_would(scheduled: bool) -> None:
    """A float rate is set on the optimizer; a ``LearningRateSchedule`` gets a multiplier (where
    Keras's ``ReduceLROnPlateau`` raises ``TypeError``): the weights equal Keras's own schedule's
    doing the same change, and ``learning_rate`` is the rate of each step."""
    weights, steer = _keras_run(scheduled, hooked=True)
    reference, _ = _keras_run(scheduled, hooked=False)
    for got, want in zip(weights, reference, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    rates = dict(steer.seen)
    expected = [0.1 * (0.5 ** ((s - 1) / 10) if scheduled else 1.0) * (FACTOR if s > AT else 1.0) for s in rates]
    np.testing.assert_allclose([rates[s] for s in sorted(rates)], expected, rtol=1e-6)
    assert [c.step for c in steer.changes] == [AT]


def test_a_rate_asked_of_a_keras_schedule_becomes_its_multiplier() -> None:
    """``rate=r`` on a schedule: the next step trains with ``r``, the multiplier is ``r`` over the
    schedule's value then, and the schedule goes on scaled."""
    _, steer = _keras_run(True, hooked=True, by_rate=True)
    rates = dict(steer.seen)
    [change] = steer.changes
    assert change.new == pytest.approx(rates[AT] * FACTOR, rel=1e-6) == pytest.approx(rates[AT + 1], rel=1e-6)
    multiplier = FACTOR * 0.5 ** ((AT - 1) / 10) / 0.5 ** (AT / 10)
    assert change.multiplier == pytest.approx(multiplier, rel=1e-6)
    assert rates[STEPS] == pytest.approx(0.1 * 0.5 ** ((STEPS - 1) / 10) * multiplier, rel=1e-6)


def _square_step(w: Any, optimizer: Any) -> Any:
    """One traced training step of the loop tests: ``w * w`` minimized by ``optimizer``."""

    @tf.function  # type: ignore[untyped-decorator]
    def train_step() -> Any:
        with tf.GradientTape() as tape:
            loss = w * w
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    return train_step


def _loop_run(how: str, *, hooked: bool) -> tuple[list[Any], Steer]:
    w = tf.Variable(1.0)
    kwargs: dict[str, Any] = {}
    if how == "variable":  # the optimizer's rate variable, set by hookbus; the reference: Keras's schedule
        rate: Any = 0.1 if hooked else keras.optimizers.schedules.PiecewiseConstantDecay([AT - 1], [0.1, 0.1 * FACTOR])
        optimizer = keras.optimizers.SGD(rate)
        kwargs["learning_rate"] = optimizer.learning_rate
    else:
        base = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
        optimizer = keras.optimizers.SGD(base if hooked else _Later(base))
        kwargs["optimizer"] = optimizer
    steer = Steer()
    bus = hookbus.EventBus()
    if hooked:
        bus.attach(steer)
    loop = hookbus.LoopPublisher(bus, keys=["loss"], step_counter=optimizer.iterations, **(kwargs if hooked else {}))

    train_step = _square_step(w, optimizer)

    with bus, loop:
        for _ in range(STEPS):
            loop.step({"loss": train_step()})
    return [w.numpy()], steer


@pytest.mark.parametrize("how", ["variable", "optimizer-schedule"])
def test_the_loop_publisher_steers_a_variable_or_an_optimizer_as_a_schedule_would(how: str) -> None:
    """``LoopPublisher(learning_rate=<tf.Variable>)`` sets the variable, ``optimizer=`` with a
    schedule gets the multiplier; the loop's values need not hold ``learning_rate``."""
    weights, steer = _loop_run(how, hooked=True)
    reference, _ = _loop_run(how, hooked=False)
    np.testing.assert_allclose(weights, reference, rtol=1e-6)
    scheduled = how != "variable"
    rates = dict(steer.seen)
    expected = [0.1 * (0.5 ** ((s - 1) / 10) if scheduled else 1.0) * (FACTOR if s > AT else 1.0) for s in rates]
    np.testing.assert_allclose([rates[s] for s in sorted(rates)], expected, rtol=1e-6)
    assert [c.step for c in steer.changes] == [AT]


def test_a_sink_that_needs_a_rate_fails_at_begin_naming_what_to_pass() -> None:
    """A TF1 hook given no ``learning_rate=``: the sink that steers the rate fails before step 1."""
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.Variable(1.0)
        train_op = v1.train.GradientDescentOptimizer(0.1).minimize(w * w, global_step=step)
        bus = hookbus.EventBus()
        bus.attach(Steer(keys="loss"))  # it needs no rate key: the rate itself
        hook = hookbus.EventBusHook(bus, {"loss": w * w}, train_op=train_op)
        needs = r"needs a learning rate.*EventBusHook\(\.\.\., learning_rate="
        with pytest.raises(ValueError, match=needs), bus, hookbus.monitored_training_session(hooks=[hook]) as session:
            session.run(train_op)


def test_bad_rate_arguments_fail_naming_the_value() -> None:
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.Variable(1.0)
        unused = tf.constant(0.1)
        train_op = v1.train.GradientDescentOptimizer(0.1).minimize(w * w, global_step=step)
        with pytest.raises(TypeError, match=r"learning_rate must be .*\(got 0.1\)"):
            hookbus.EventBusHook(hookbus.EventBus(), train_op=train_op, learning_rate=0.1)
        with pytest.raises(ValueError, match="mode='train'"):
            hookbus.EventBusHook(hookbus.EventBus(), {"loss": w}, mode="eval", learning_rate=unused)
        hook = hookbus.EventBusHook(hookbus.EventBus(), train_op=train_op, learning_rate=unused)
        with pytest.raises(ValueError, match="is used by no operation of the graph"):
            hook.begin()
        fed = v1.placeholder(tf.float32, shape=(), name="fed_rate")
        v1.train.GradientDescentOptimizer(fed).minimize(w * w)
        hook = hookbus.EventBusHook(hookbus.EventBus(), train_op=train_op, learning_rate=fed)
        with pytest.raises(ValueError, match="'fed_rate:0' is fed .*pass a rate variable"):
            hook.begin()
    with pytest.raises(ValueError, match="not both"):
        hookbus.LoopPublisher(hookbus.EventBus(), keys="loss", learning_rate=tf.Variable(0.1), optimizer=object())


def test_a_request_is_checked_when_made() -> None:
    """Both or neither of rate/multiplier, a value that is no rate, a multiplier on a settable rate."""
    from hookbus._tf._learning_rate_tf import VariableRate

    rate = LearningRate(VariableRate(tf.Variable(0.1)), publisher="LoopPublisher")
    with pytest.raises(ValueError, match="exactly one of rate= and multiplier="):
        rate.request(reason="r")
    with pytest.raises(ValueError, match=r"rate must be a positive finite number \(got nan\)"):
        rate.request(rate=float("nan"), reason="r")
    with pytest.raises(ValueError, match="follows no schedule: ask for rate="):
        rate.request(multiplier=0.5, reason="r")
    with pytest.raises(ValueError, match="reason must be a non-empty string"):
        rate.request(rate=0.5, reason="")
    assert rate.pending is None


def test_a_parameter_server_worker_that_is_not_the_chief_drops_its_requests(caplog: pytest.LogCaptureFixture) -> None:
    """Under parameter servers the chief alone sets the one rate every worker reads: a worker's
    request is dropped, with one warning naming ``runs_on='chief'``, and never applied."""
    from hookbus._tf._learning_rate_tf import VariableRate

    variable = tf.Variable(0.1)
    rate = LearningRate(VariableRate(variable), publisher="EventBusHook")
    rate.drop_requests()
    with caplog.at_level("WARNING", logger="hookbus"):
        rate.request(rate=0.5, reason="worker 1's plateau")
        rate.request(rate=0.25, reason="again")
    assert rate.pending is None
    assert not rate.local
    assert [r.getMessage().count("runs_on='chief'") for r in caplog.records] == [1]
    assert float(variable.numpy()) == pytest.approx(0.1)


class _AfterEvaluation(Steer):
    """Asks for a tenth of the rate after the first evaluation (between two training sessions)."""

    def __init__(self) -> None:
        super().__init__(keys=["learning_rate", "eval/loss"])

    def on_after_run(self, event: hookbus.Event) -> None:
        if event.mode == "eval":
            if not self.changes and self.rate is not None and self.rate.pending is None:
                if self.rate.scheduled:
                    self.rate.request(multiplier=FACTOR, reason="after the first evaluation")
                else:
                    self.rate.request(rate=0.1 * FACTOR, reason="after the first evaluation")
            return
        self.seen.append((event.step, event.values["learning_rate"]))


@pytest.mark.parametrize("scheduled", [True, False], ids=["schedule-tensor", "rate-variable"])
def test_a_rate_asked_for_at_an_evaluation_trains_the_next_rounds_of_train_and_evaluate(
    tmp_path: Any, scheduled: bool
) -> None:
    """``train_and_evaluate``: a request made at the evaluation between two training sessions (the
    hook begins again on the same graph) applies before the next round's first step, and a
    multiplier stays in effect in the rounds after (each a new session restored from a checkpoint)."""
    from hookbus.sinks import CheckpointSink

    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.Variable(1.0)
        rate: Any = (
            v1.train.exponential_decay(0.1, step, 10**6, 0.5) if scheduled else v1.Variable(0.1, trainable=False)
        )
        train_op = v1.train.GradientDescentOptimizer(rate).minimize(w * w, global_step=step)
        bus = hookbus.EventBus()
        steer = bus.attach(_AfterEvaluation())
        bus.attach(CheckpointSink(tmp_path, every_n_secs=None, every_n_steps=10**6))
        train = hookbus.EventBusHook(bus, {"loss": w * w}, train_op=train_op, learning_rate=rate)
        evaluate = hookbus.EventBusHook(bus, {"loss": w * w}, mode="eval")
        with bus:
            hookbus.train_and_evaluate(
                bus,
                train_op=train_op,
                eval_fetches=w * w,
                checkpoint_dir=str(tmp_path),
                steps_per_round=3,
                train_hooks=[train],
                eval_hooks=[evaluate],
                eval_steps=1,
                max_rounds=3,
            )
    rates = dict(steer.seen)
    assert sorted(rates) == list(range(1, 10))
    expected = {s: pytest.approx(0.1 * (FACTOR if s > 3 else 1.0), rel=1e-5) for s in rates}
    assert rates == expected
    assert [c.step for c in steer.changes] == [3]


@pytest.mark.parametrize("how", ["variable", "optimizer"])
def test_the_loops_final_event_publishes_the_rate_that_trained_the_last_step(how: str) -> None:
    """A reduction the last evaluation decides is applied after the last step: the at-end event of
    that step still carries the rate it trained with."""
    from hookbus.sinks import ReduceLROnPlateauSink

    w = tf.Variable(1.0)
    optimizer = keras.optimizers.SGD(0.5)
    offered = {"learning_rate": optimizer.learning_rate} if how == "variable" else {"optimizer": optimizer}
    bus = hookbus.EventBus()
    bus.attach(ReduceLROnPlateauSink(monitor="eval/loss", factor=0.5, patience=1, min_delta=1e9))
    final: list[tuple[int, float]] = []

    def at_end(event: Any) -> None:
        if event.final:
            final.append((event.step, event.values["learning_rate"]))

    bus.on("after_run", at_end, keys="learning_rate", every_n_steps=1000, at_end=True)
    loop = hookbus.LoopPublisher(
        bus, keys=["loss", "learning_rate"], eval_keys=["loss"], step_counter=optimizer.iterations, **offered
    )

    train_step = _square_step(w, optimizer)

    with bus, loop:
        for _ in range(2):
            for _ in range(4):
                loss = train_step()
                loop.step({"loss": loss})
            loop.evaluate({"loss": float(loss)})
    assert float(optimizer.learning_rate.numpy()) == 0.25  # the second evaluation reduced it
    assert final == [(8, 0.5)]
