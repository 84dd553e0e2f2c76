"""StopAtStepSink: StopAtStepHook's semantics, a time budget, and no fetch until it is due."""

from __future__ import annotations

from typing import Any

import pytest

from hookbus import EventBus
from hookbus.sinks import StopAtStepSink
from hookbus.testing import FakeClock, ScriptedPublisher


def run(sink: StopAtStepSink, *, start: int = 0, steps: int = 1000, clock: FakeClock | None = None) -> tuple[int, Any]:
    bus = EventBus(clock=clock) if clock is not None else EventBus()
    bus.attach(sink)
    publisher = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        last = publisher.run(({"loss": 1.0} for _ in range(steps)), start=start)
    return last, (bus, publisher)


def test_last_step_stops_exactly_there_and_fetches_only_then() -> None:
    last, (bus, publisher) = run(StopAtStepSink(last_step=37))
    assert last == 37
    assert bus.stop_reason == "reached step 37 (last_step 37)"
    assert [step for step, _ in publisher.fetched] == [37]


def test_num_steps_counts_from_the_session_start() -> None:
    sink = StopAtStepSink(num_steps=25)
    last, (_, publisher) = run(sink, start=110)
    assert last == 135
    assert sink.total_steps == 135
    assert [step for step, _ in publisher.fetched] == [135]


def test_a_session_at_or_past_last_step_stops_at_once() -> None:
    last, (bus, _) = run(StopAtStepSink(last_step=50), start=50)
    assert last == 51  # the publisher ends the step it is in, like StopAtStepHook
    assert bus.stop_reason == "step 50 is already at or past last_step 50"


def test_time_budget_with_an_injected_clock() -> None:
    clock = FakeClock(tick=1.0)  # every reading is one second later
    last, (bus, _) = run(StopAtStepSink(last_step=10_000, max_seconds=30.0), clock=clock)
    assert 1 < last < 100
    assert bus.stop_reason is not None
    assert bus.stop_reason.startswith("time budget of 30 s spent")


def test_total_steps_is_known_for_last_step_at_once() -> None:
    assert StopAtStepSink(last_step=20_000).total_steps == 20_000
    assert StopAtStepSink(num_steps=10).total_steps is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"give exactly one of last_step or num_steps \(got last_step=None, num_steps=None\)"),
        ({"last_step": 10, "num_steps": 5}, r"give exactly one of last_step or num_steps"),
        ({"last_step": 0}, r"last_step must be a positive int \(got 0\)"),
        ({"num_steps": -3}, r"num_steps must be a positive int \(got -3\)"),
        ({"last_step": 5, "max_seconds": 0}, r"max_seconds must be a positive finite number of seconds \(got 0\)"),
    ],
)
def test_bad_settings_fail_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StopAtStepSink(**kwargs)
