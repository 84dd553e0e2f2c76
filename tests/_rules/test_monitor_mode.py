"""Monitors' defaults, as Keras's: mode="auto" by the one direction rule, and a monitor that never comes.

Scripted events only (no TensorFlow); tests/_tf/keras/test_keras_monitors.py runs the same against Keras's
own callbacks on real fits.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from hookbus import EventBus
from hookbus.publisher_api import ModelView
from hookbus.sinks import EarlyStoppingSink
from hookbus.testing import ScriptedPublisher


def evaluations(sink: EarlyStoppingSink, values: list[float], *, keys: tuple[str, ...] = ("accuracy",)) -> int:
    """Train 10 steps between evaluations of ``values``; the step training stopped at."""
    bus = EventBus()
    bus.attach(sink)
    train = ScriptedPublisher(bus, keys=["loss"])
    evaluate = ScriptedPublisher(bus, keys=list(keys), mode="eval")
    with bus:
        train.begin()
        train.session(0)
        for value in values:
            for _ in range(10):
                train.advance({"loss": 1.0})
            evaluate.evaluate({keys[0]: value}, step=train.step)
            if bus.should_stop:
                break
        train.end()
    return train.step


def test_accuracy_is_maximised_by_default() -> None:
    # Rising accuracy is improvement: patience 0 stops only at the first evaluation that does not rise.
    sink = EarlyStoppingSink("eval/accuracy")
    assert evaluations(sink, [0.5, 0.6, 0.7, 0.65, 0.8]) == 40
    assert sink.rule.monitor.mode == "max"
    assert sink.state.best == 0.7


def test_a_key_nothing_can_decide_fails_before_step_1_asking_for_mode() -> None:
    bus = EventBus()
    published: list[Any] = []
    bus.after_run.connect(lambda sender, event: published.append(event), weak=False)
    bus.attach(EarlyStoppingSink("eval/foo"))  # constructing is fine: a publisher may declare it at begin
    train = ScriptedPublisher(bus, keys=["loss"])
    ScriptedPublisher(bus, keys=["foo"], mode="eval")
    with (
        pytest.raises(
            ValueError,
            match=r"EarlyStoppingSink: mode='auto' cannot tell whether 'eval/foo' should go "
            r"down or up .*pass mode='min' or mode='max'",
        ),
        bus,
    ):
        train.run([{"loss": 1.0}] * 3)
    assert published == []
    assert train.step == 0


def test_what_the_publisher_declares_settles_auto_and_an_explicit_mode_stays() -> None:
    declared = {"eval/hits": "max", "eval/misses": "min"}
    auto, explicit, named = (
        EarlyStoppingSink("eval/hits"),
        EarlyStoppingSink("eval/hits", mode="min"),
        EarlyStoppingSink("eval/misses", name="misses"),
    )
    bus = EventBus()
    for sink in (auto, explicit, named):
        bus.attach(sink)
    train = ScriptedPublisher(bus, keys=["loss"], model=_Declares(declared))
    ScriptedPublisher(bus, keys=["hits", "misses"], mode="eval")
    with bus:
        train.begin()
        train.end()
    assert (auto.rule.monitor.mode, explicit.rule.monitor.mode, named.rule.monitor.mode) == ("max", "min", "min")


class _Declares(ModelView):
    """A model view answering only :meth:`direction`, from a table."""

    def __init__(self, declared: dict[str, str]) -> None:
        self._declared = declared

    def direction(self, key: str) -> str | None:
        return self._declared.get(key)


def _epochs(sink: EarlyStoppingSink, epochs: int, *, with_eval: bool) -> None:
    bus = EventBus()
    bus.attach(sink)
    train = ScriptedPublisher(bus, keys=["loss"])
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    with bus:
        train.begin()
        train.session(0)
        for epoch in range(epochs):
            for _ in range(4):
                train.advance({"loss": 1.0})
            if with_eval:
                evaluate.evaluate({"loss": 1.0 / (epoch + 1)}, step=train.step)
            train.core.publish_epoch(train.step, {"epoch": float(epoch), "epoch/loss": 1.0})
        train.end()


def test_an_epoch_that_ends_without_the_monitor_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hookbus"):
        _epochs(EarlyStoppingSink("eval/loss"), 3, with_eval=False)
    warned = [r.getMessage() for r in caplog.records if "ended without" in r.getMessage()]
    assert warned == [
        "EarlyStoppingSink: epoch 1 ended without 'eval/loss', so early stopping has decided nothing yet; evaluation "
        "keys come from fit's validation (fit(validation_data=...) or validation_split=...); the epoch's keys are "
        "['epoch/loss']"
    ]


def test_no_report_when_the_monitor_comes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hookbus"):
        _epochs(EarlyStoppingSink("eval/loss"), 3, with_eval=True)
        _epochs(EarlyStoppingSink("loss", every_n_steps=100), 3, with_eval=False)  # a training key: its schedule
    assert [r.getMessage() for r in caplog.records if "ended without" in r.getMessage()] == []
