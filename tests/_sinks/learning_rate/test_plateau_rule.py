"""The plateau rule (sinks/learning_rate/_plateau.py): its quirks, and its agreement with
keras.callbacks.ReduceLROnPlateau."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _keras_data import KERAS_NP_ARRAY
from hypothesis import given, settings
from hypothesis import strategies as st

from hookbus.sinks._monitor import Monitor
from hookbus.sinks.learning_rate._plateau import PlateauRule, PlateauState, decide, plateau_rule


def rule(mode: str = "min", min_delta: float = 0.0, **kwargs: Any) -> PlateauRule:
    return PlateauRule(monitor=Monitor("loss", mode, min_delta), **kwargs)


def as_float32(rate: float) -> float:
    """The rate as the optimizer's float32 variable holds it once set."""
    return float(np.float32(rate))


def rates(r: PlateauRule, values: list[float], rate: float = 1.0) -> list[float]:
    """The rate after each evaluation, as a float32 variable holding it would read."""
    state, out = PlateauState(), []
    rate = as_float32(rate)
    for step, value in enumerate(values, start=1):
        state, new = decide(r, state, value, rate, step)
        if new is not None:
            rate = as_float32(new)
        out.append(rate)
    return out


# -- the quirks, one by one --------------------------------------------------------------------
def test_it_reduces_on_the_patience_th_evaluation_without_improvement() -> None:
    assert rates(rule(patience=2, factor=0.5), [1.0, 1.0, 1.0, 1.0, 1.0]) == [1.0, 1.0, 0.5, 0.5, 0.25]
    assert rates(rule(patience=0, factor=0.5), [1.0, 2.0, 0.5]) == [1.0, 0.5, 0.5]  # the first value improves


def test_improvement_must_beat_the_best_by_more_than_min_delta() -> None:
    r = rule(min_delta=0.25, patience=1, factor=0.5)
    assert rates(r, [1.0, 0.75]) == [1.0, 0.5]  # 0.25 better is not more than 0.25
    assert rates(r, [1.0, 0.5]) == [1.0, 1.0]
    assert rates(rule("max", patience=1, factor=0.5), [1.0, 2.0, 2.0]) == [1.0, 1.0, 0.5]


def test_cooldown_is_counted_down_before_the_test_so_one_has_no_effect_on_consecutive_bad_evaluations() -> None:
    bad = [1.0] + [2.0] * 4
    assert rates(rule(patience=1, cooldown=1, factor=0.5), bad) == rates(rule(patience=1, cooldown=0, factor=0.5), bad)
    assert rates(rule(patience=1, cooldown=2, factor=0.5), bad) == [1.0, 0.5, 0.5, 0.25, 0.25]


def test_min_lr_clamps_and_a_rate_at_min_lr_is_not_reduced_nor_starts_a_cooldown() -> None:
    r = rule(patience=1, factor=0.1, min_lr=0.001, cooldown=3)
    state = PlateauState()
    state, _ = decide(r, state, 1.0, as_float32(0.002), 1)
    state, new = decide(r, state, 1.0, as_float32(0.002), 2)
    assert new == 0.001
    assert (state.cooldown, state.wait, state.reductions) == (3, 0, 1)
    # 0.001 as float32 is 0.0010000000475, above 0.001: Keras compares with np.float32(min_lr).
    state = PlateauState(best=1.0, best_step=1)
    for step in range(2, 5):
        state, new = decide(r, state, 1.0, as_float32(0.001), step)
        assert new is None
    assert (state.cooldown, state.wait, state.reductions) == (0, 3, 0)


def test_nan_never_improves_and_a_first_nan_is_a_best_nothing_beats() -> None:
    assert rates(rule(patience=1, factor=0.5), [1.0, math.nan]) == [1.0, 0.5]
    assert rates(rule(patience=1, factor=0.5), [math.nan, 0.0]) == [1.0, 0.5]


def test_the_best_and_its_step_are_kept() -> None:
    state = PlateauState()
    for step, value in [(10, 3.0), (20, 2.0), (30, 2.5)]:
        state, _ = decide(rule(patience=5), state, value, 1.0, step)
    assert (state.best, state.best_step, state.wait) == (2.0, 20, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"factor": 1.0}, "factor must be a number between 0 and 1, exclusive"),
        ({"factor": 0.0}, "got 0.0"),
        ({"factor": "0.1"}, "factor must be a finite number"),
        ({"patience": -1}, "patience"),
        ({"cooldown": 1.5}, "cooldown"),
        ({"min_lr": -1e-3}, "min_lr must be a non-negative number"),
        ({"min_lr": math.inf}, "min_lr must be a finite number"),
    ],
)
def test_bad_settings_name_the_argument(kwargs: dict[str, Any], message: str) -> None:
    settings_ = {"factor": 0.1, "patience": 10, "cooldown": 0, "min_lr": 0.0} | kwargs
    with pytest.raises(ValueError, match=message):
        plateau_rule(Monitor("loss", "min"), **settings_)


# -- agreement with Keras ------------------------------------------------------------------------
_optimizer: Any = None


def keras_optimizer() -> Any:
    """One compiled model's optimizer, shared by the examples (building a model takes ~0.1 s)."""
    global _optimizer
    if _optimizer is None:
        keras = pytest.importorskip("keras")
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        _optimizer = model
    return _optimizer


def keras_trace(values: list[float], lr: float, **kwargs: Any) -> list[tuple[float, int, int, float | None]]:
    """(rate, wait, cooldown, best) after each epoch, from Keras's callback on a real optimizer."""
    keras = pytest.importorskip("keras")
    model = keras_optimizer()
    model.optimizer.learning_rate = lr
    callback = keras.callbacks.ReduceLROnPlateau(monitor="loss", **kwargs)
    callback.set_model(model)
    callback.on_train_begin()
    out = []
    for epoch, value in enumerate(values):
        callback.on_epoch_end(epoch, logs={"loss": value})
        best = None if callback.best is None else float(callback.best)
        out.append((float(model.optimizer.learning_rate), callback.wait, callback.cooldown_counter, best))
    return out


def our_trace(values: list[float], lr: float, **kwargs: Any) -> list[tuple[float, int, int, float | None]]:
    mode = kwargs.pop("mode")
    r = plateau_rule(Monitor("loss", "min" if mode == "auto" else mode, kwargs.pop("min_delta")), **kwargs)
    state, rate, out = PlateauState(), as_float32(lr), []
    for step, value in enumerate(values, start=1):
        state, new = decide(r, state, value, rate, step)
        if new is not None:
            rate = as_float32(new)
        out.append((rate, state.wait, state.cooldown, state.best))
    return out


def same(a: float | None, b: float | None) -> bool:
    return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))


# Quarter steps are exact in float32, which Keras compares values in; the rule compares in float64.
quarters = st.integers(-20, 20).map(lambda i: i / 4)
values_ = st.lists(quarters | st.just(math.nan), min_size=1, max_size=16)


@KERAS_NP_ARRAY  # Keras's ReduceLROnPlateau reads the rate with np.array(variable)
@settings(max_examples=300, deadline=None)
@given(
    values=values_,
    mode=st.sampled_from(["min", "max", "auto"]),
    factor=st.floats(0.01, 0.99),
    patience=st.integers(0, 4),
    cooldown=st.integers(0, 3),
    min_delta=st.sampled_from([0.0, 1e-4, 0.25, 0.5, 1.0]),
    min_lr=st.sampled_from([0.0, 1e-4, 1e-3, 0.01]) | st.floats(0.0, 0.1),
    lr=st.sampled_from([0.1, 1e-3, 0.01]) | st.floats(1e-4, 1.0),
)
def test_rates_and_state_agree_with_keras_reduce_lr_on_plateau(
    values: list[float],
    mode: str,
    factor: float,
    patience: int,
    cooldown: int,
    min_delta: float,
    min_lr: float,
    lr: float,
) -> None:
    settings_ = {"mode": mode, "factor": factor, "patience": patience, "cooldown": cooldown, "min_delta": min_delta}
    theirs = keras_trace(values, lr, min_lr=min_lr, **settings_)
    ours = our_trace(values, lr, min_lr=min_lr, **settings_)
    assert [t[:3] for t in ours] == [t[:3] for t in theirs]
    assert all(same(o[3], t[3]) for o, t in zip(ours, theirs, strict=True))
