"""TimelineSink without TensorFlow: one run writes a directory's timelines at a time, and under a
publisher that traces no single run it writes nothing and says so once."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hookbus import EventBus
from hookbus.sink_api import OutputInUseError
from hookbus.sinks import TimelineSink
from hookbus.testing import FakeClock, ScriptedPublisher


def test_a_second_run_on_the_same_timelines_fails_as_it_begins(tmp_path: Path) -> None:
    first_bus, second_bus = EventBus(clock=FakeClock()), EventBus(clock=FakeClock())
    first = ScriptedPublisher(first_bus, keys=["loss"])
    first_bus.attach(TimelineSink(tmp_path, every_n_steps=2))
    second_bus.attach(TimelineSink(tmp_path, every_n_steps=2, name="second"))
    second = ScriptedPublisher(second_bus, keys=["loss"])
    with first_bus:
        first.begin()
        with pytest.raises(OutputInUseError, match="timeline"), second_bus:
            second.begin()
        first.end()
    with second_bus:  # released at the first run's end
        second.run({"loss": 1.0} for _ in range(2))


def test_no_run_traces_offered_writes_nothing_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bus = EventBus(clock=FakeClock())
    sink = bus.attach(TimelineSink(tmp_path, every_n_steps=2))
    with caplog.at_level(logging.WARNING, logger="hookbus"), bus:
        ScriptedPublisher(bus, keys=["loss"]).run({"loss": 1.0} for _ in range(6))
    assert sink.written == []
    assert list(tmp_path.glob("timeline-*.json")) == []
    said = [r.getMessage() for r in caplog.records if "traces no single run" in r.getMessage()]
    assert len(said) == 1
