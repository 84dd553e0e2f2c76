"""EarlyStoppingSink: the pure rule, its agreement with keras.callbacks.EarlyStopping, the sink."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookbus import EventBus, UnknownKeyError
from hookbus.sink_api import Sink
from hookbus.sinks import EarlyStoppingSink
from hookbus.sinks._monitor import Monitor, resolve_direction
from hookbus.sinks.early_stopping import EarlyStopRule, EarlyStopState, decide
from hookbus.testing import ScriptedPublisher


def stop_index(rule: EarlyStopRule, values: list[float]) -> int | None:
    """The evaluation (0-based) at which :func:`decide` stops, or None."""
    state = EarlyStopState()
    for i, value in enumerate(values):
        state, stop, _ = decide(rule, state, value, step=i + 1)
        if stop:
            return i
    return None


def rule(mode: str = "min", **kwargs: Any) -> EarlyStopRule:
    return EarlyStopRule(monitor=Monitor("loss", mode, kwargs.pop("min_delta", 0.0)), **kwargs)


# -- the pure rule ------------------------------------------------------------------------------
def test_patience_counts_evaluations_without_improvement() -> None:
    assert stop_index(rule(patience=2), [1.0, 0.9, 0.95, 0.91, 0.8]) == 3
    assert stop_index(rule(patience=2), [1.0, 0.9, 0.95, 0.8, 0.91, 0.92]) == 5


def test_patience_zero_stops_at_the_first_non_improvement_but_never_at_the_first_evaluation() -> None:
    assert stop_index(rule(patience=0), [5.0]) is None
    assert stop_index(rule(patience=0), [5.0, 4.0, 4.0]) == 2


def test_min_delta_and_max_mode() -> None:
    assert stop_index(rule(patience=0, min_delta=0.5), [1.0, 0.7]) == 1  # 0.3 better: not enough
    assert stop_index(rule("max", patience=1), [0.1, 0.2, 0.2, 0.2]) == 2


def test_baseline_keeps_the_count_until_a_value_beats_it() -> None:
    # Improving on the best but not on the baseline 0.5 does not restart the count (Keras).
    assert stop_index(rule(patience=2, baseline=0.5), [1.0, 0.9, 0.95]) == 2
    assert stop_index(rule(patience=2, baseline=0.5), [1.0, 0.4, 0.45, 0.46, 0.47]) == 3


def test_thresholds_and_nonfinite_stop_at_once() -> None:
    assert stop_index(rule(patience=99, stop_above=10.0), [1.0, 11.0]) == 1
    assert stop_index(rule(patience=99, stop_below=0.01), [1.0, 0.5, 0.001]) == 2
    assert stop_index(rule(patience=99), [1.0, math.nan]) == 1
    assert stop_index(rule(patience=99, stop_on_nonfinite=False), [1.0, math.inf, 0.5]) is None


def test_evaluations_before_min_steps_are_ignored() -> None:
    r = rule(patience=0, min_steps=3)
    state = EarlyStopState()
    for step, value in [(1, 1.0), (2, 2.0), (3, 3.0), (4, 3.5)]:
        state, stop, reason = decide(r, state, value, step)
    assert stop
    assert reason is not None
    assert "did not improve on 3" in reason
    assert state.seen == 2


# -- agreement with Keras -------------------------------------------------------------------------
class _Model:
    stop_training = False


def keras_stop_index(values: list[float], **kwargs: Any) -> int | None:
    keras = pytest.importorskip("keras")
    callback = keras.callbacks.EarlyStopping(monitor="loss", **kwargs)
    model = _Model()
    callback.set_model(model)
    callback.on_train_begin()
    for epoch, value in enumerate(values):
        callback.on_epoch_end(epoch, {"loss": value})
        if model.stop_training:
            return epoch
    return None


# Quarter steps are exact in float32, which Keras compares in; ours compares in float64.
quarters = st.integers(-40, 40).map(lambda i: i / 4)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(quarters, min_size=1, max_size=12),
    mode=st.sampled_from(["min", "max"]),
    patience=st.integers(0, 4),
    min_delta=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    baseline=st.none() | quarters,
)
def test_decisions_agree_with_keras_early_stopping(
    values: list[float], mode: str, patience: int, min_delta: float, baseline: float | None
) -> None:
    ours = stop_index(rule(mode, patience=patience, min_delta=min_delta, baseline=baseline), values)
    theirs = keras_stop_index(values, mode=mode, patience=patience, min_delta=min_delta, baseline=baseline)
    assert ours == theirs


# -- settings -------------------------------------------------------------------------------------
def test_auto_mode_only_where_the_key_tells() -> None:
    assert resolve_direction("eval/loss", "auto") == "min"
    assert resolve_direction("val_error", "auto") == "min"
    assert resolve_direction("accuracy", "auto") == "max"
    assert resolve_direction("eval/auc", "auto") == "max"
    assert resolve_direction("eval/mape", "auto") == "min"  # an error, not a 'map'
    assert resolve_direction("eval/hits", "auto", declared="max") == "max"  # what the metric declares wins
    assert resolve_direction("eval/loss", "min", declared="max") == "min"  # an explicit mode is kept
    with pytest.raises(ValueError, match="cannot tell whether 'lr'.*pass mode='min' or mode='max'"):
        resolve_direction("lr", "auto")


@pytest.mark.parametrize("key", ["loss", "eval/loss", "val_error", "accuracy", "eval/auc", "f1", "precision", "mAP"])
def test_early_stopping_and_the_dashboard_agree_on_which_way_is_better(key: str) -> None:
    """One rule for "higher is better": the dashboard's best column and mode='auto' agree."""
    from hookbus.sinks.console._render import best_direction

    assert resolve_direction(key, "auto") == best_direction(key)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"patience": -1}, r"patience must be a non-negative int \(got -1\)"),
        ({"mode": "down"}, r"mode must be 'min', 'max' or 'auto' \(got 'down'\)"),
        ({"min_delta": math.nan}, r"min_delta must be a finite number"),
        ({"min_steps": 1.5}, r"min_steps must be a non-negative int \(got 1.5\)"),
        ({"restore_best": 1}, r"restore_best must be True or False"),
    ],
)
def test_bad_settings_fail_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EarlyStoppingSink("loss", **kwargs)


# -- the sink on a bus ----------------------------------------------------------------------------
def test_sink_stops_on_eval_events_and_the_reason_reaches_the_bus() -> None:
    bus = EventBus()
    sink = bus.attach(EarlyStoppingSink("eval/loss", patience=1))
    train = ScriptedPublisher(bus, keys=["loss"])
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    with bus:
        train.begin()
        train.session(0)
        for step, value in [(100, 1.0), (200, 0.5), (300, 0.6), (400, 0.7)]:
            train.advance({"loss": 0.0}, step=step)
            evaluate.evaluate({"loss": value}, step=step)
            if bus.should_stop:
                break
    assert train.step == 300  # patience 1: the first evaluation without improvement stops (Keras)
    assert bus.stop_reason is not None
    assert "eval/loss did not improve on 0.5 (step 200)" in bus.stop_reason
    assert sink.status() == "early stop: patience 1/1 (best 0.5 @ 200)"
    assert sink.state_dict() == {"best": 0.5, "best_step": 200, "wait": 1, "seen": 3, "stop_reason": bus.stop_reason}


def test_state_round_trips() -> None:
    a = EarlyStoppingSink("loss", patience=3)
    a.load_state_dict({"best": 0.25, "best_step": 40, "wait": 2, "seen": 7})
    b = EarlyStoppingSink("loss", patience=3)
    b.load_state_dict(a.state_dict())
    assert b.state == EarlyStopState(0.25, 40, 2, 7)


def test_unknown_monitor_key_fails_at_begin() -> None:
    bus = EventBus()
    bus.attach(EarlyStoppingSink("eval/los"))
    publisher = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    with pytest.raises(UnknownKeyError, match="'eval/los'.*known keys: \\['eval/loss'\\]"):
        publisher.begin()


def test_restore_best_without_a_publisher_holding_a_model_fails_at_begin() -> None:
    bus = EventBus()
    bus.attach(EarlyStoppingSink("loss", restore_best=True))
    publisher = ScriptedPublisher(bus, keys=["loss"])
    with pytest.raises(
        ValueError,
        match="restore_best=True puts the best weights back into the live model, and this "
        "training publisher holds none",
    ):
        publisher.begin()


class StepWeights:
    """A model whose weights are the step they were trained to (a test double for a Keras model)."""

    def __init__(self) -> None:
        self.step = 0
        self.restored: list[int] = []

    def snapshot(self) -> object:
        return self.step

    def restore(self, snapshot: object) -> None:
        assert isinstance(snapshot, int)
        self.step = snapshot
        self.restored.append(snapshot)

    def read(self, prefix: str) -> object | None:
        return None  # no checkpoints in these tests


class FinalSave(Sink):
    """Saves at the end through ``defer``, as CheckpointSink does: records the weights it saved."""

    def __init__(self, model: StepWeights, states: dict[str, Any] | None = None) -> None:
        super().__init__(name="FinalSave")
        self.model, self.states, self.saved, self.stops = model, states, list[int](), list[str]()

    def on_session_created(self, event: Any) -> None:  # after early stopping, as a checkpoint sink
        if self.states is not None and event.restored:
            self.context.checkpoints.load_states(self.states)

    def on_end(self, event: Any) -> None:
        self.context.defer(lambda: self.saved.append(self.model.step))


def train_with_weights(
    values: list[float], *, start: int = 0, states: dict[str, Any] | None = None, **kwargs: Any
) -> tuple[EventBus, EarlyStoppingSink, StepWeights, FinalSave]:
    bus = EventBus()
    model = StepWeights()
    model.step = start
    sink = bus.attach(EarlyStoppingSink("loss", restore_best=True, **kwargs))
    save = bus.attach(FinalSave(model, states))
    bus.on("stop_requested", lambda request: save.stops.append(request.source))
    publisher = ScriptedPublisher(bus, keys=["loss"], weights=model)
    with bus:
        publisher.begin()
        publisher.session(start, restored=start > 0)
        for value in [] if bus.should_stop else values:
            model.step += 1
            if publisher.advance({"loss": value}, step=model.step):
                break
        publisher.end()
    return bus, sink, model, save


def test_restore_best_puts_back_the_weights_of_the_best_step_by_the_rule_after_the_final_save() -> None:
    # min_delta 0.1: 0.95 and 0.80 are no improvement, so the best by the rule is step 3 (0.85),
    # not step 5 where the lowest value is.
    bus, sink, model, save = train_with_weights([1.0, 0.95, 0.85, 0.80, 0.79, 0.5], patience=2, min_delta=0.1)
    assert sink.stopped_at == 5
    assert "did not improve on 0.85 (step 3)" in (bus.stop_reason or "")
    assert save.saved == [5]  # the final save holds the weights training ended with
    assert model.restored == [3]
    assert model.step == 3


def test_restore_best_also_at_an_end_without_an_early_stop_as_keras() -> None:
    bus, sink, model, save = train_with_weights([3.0, 1.0, 2.0, 2.5], patience=5)
    assert bus.stop_reason is None
    assert save.saved == [4]
    assert model.restored == [2]


def test_after_a_restart_the_best_weights_are_those_of_the_resumed_checkpoint_or_none() -> None:
    state = {"best": 0.5, "best_step": 10, "wait": 0, "seen": 3, "stop_reason": None}
    _, _, model, _ = train_with_weights([0.9, 0.8], start=10, states={"EarlyStoppingSink": state}, patience=5)
    assert model.restored == [10]  # the checkpoint resumed from was the best
    older = {**state, "best_step": 6}
    _, _, model, _ = train_with_weights([0.9, 0.8], start=10, states={"EarlyStoppingSink": older}, patience=5)
    assert model.restored == []  # step 6's weights are gone with the old process: the last stay


def test_a_resume_after_an_early_stop_stops_again_before_training_a_step() -> None:
    reason = "early stopping: loss did not improve on 0.5 (step 6) for 2 evaluations (patience 2)"
    state = {"best": 0.5, "best_step": 6, "wait": 2, "seen": 5, "stop_reason": reason}
    bus, sink, model, save = train_with_weights([0.1], start=10, states={"EarlyStoppingSink": state}, patience=2)
    assert save.stops == ["EarlyStoppingSink"]  # its request, though another sink loaded the state
    assert model.step == 10  # not one step trained
    assert bus.stop_reason == reason + " (before the restart)"
    # With more patience than was used up, the resumed run trains on.
    bus, _, model, _ = train_with_weights([0.1], start=10, states={"EarlyStoppingSink": state}, patience=3)
    assert model.step == 11
    assert bus.stop_reason is None
