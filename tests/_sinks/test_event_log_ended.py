"""The event log's ``close`` record says how the run ended in one word (issue 36 item 4).

``{"v": 1, "record": "close", "step": S, "wall_time": T, "ended": "finished" | "stopped" |
"crashed"}``, from the first stop request and the exception the log saw
(:func:`hookbus.sink_api.how_ended`): what ``hookbus watch`` reads. Scripted steps drive a real
bus, with real signals and threads.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import hookbus
from hookbus.sinks import EarlyStoppingSink, EventLogSink, StopAtStepSink
from hookbus.testing import FakeClock, ScriptedPublisher


def close_record(path: Path) -> dict[str, Any]:
    found = hookbus.read_event_log(path)
    assert [r["record"] for r in found].count("close") == 1
    assert found[-1]["record"] == "close"
    return found[-1]


def train(
    path: Path,
    at_step: Callable[[hookbus.EventBus, int], None] | None = None,
    *,
    sinks: tuple[hookbus.sink_api.Sink, ...] = (),
) -> hookbus.EventBus:
    """Up to 50 steps under ``with bus:`` with a log and a subscriber due every step (as
    NanGuardSink is); ``at_step(bus, step)`` runs on the training thread after each step."""
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(EventLogSink(path))
    for sink in sinks:
        bus.attach(sink)
    bus.on("after_run", lambda e: None, keys=["loss"])
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 51):
            if pub.advance({"loss": 1.0 / step}):
                break
            if at_step is not None:
                at_step(bus, step)
        pub.end()
    return bus


def test_a_run_that_reaches_its_last_step_or_early_stopping_or_its_end_finished(tmp_path: Path) -> None:
    train(tmp_path / "last.jsonl", sinks=(StopAtStepSink(last_step=23),))
    record = close_record(tmp_path / "last.jsonl")
    assert record | {"wall_time": 0.0} == {"v": 1, "record": "close", "step": 23, "wall_time": 0.0, "ended": "finished"}
    assert isinstance(record["wall_time"], float)
    bus = train(tmp_path / "early.jsonl", sinks=(EarlyStoppingSink("loss", mode="max", patience=2),))
    assert str(bus.stop_reason).startswith("early stopping")
    assert close_record(tmp_path / "early.jsonl")["ended"] == "finished"
    train(tmp_path / "all.jsonl")  # its input ended: no stop at all
    assert close_record(tmp_path / "all.jsonl") | {"wall_time": 0.0} == {
        "v": 1,
        "record": "close",
        "step": 50,
        "wall_time": 0.0,
        "ended": "finished",
    }


def test_a_stop_from_another_thread_or_a_sigterm_is_stopped(tmp_path: Path, handed_on: list[int]) -> None:
    def from_a_watchdog(bus: hookbus.EventBus, step: int) -> None:
        if step == 12:
            watchdog = threading.Thread(target=bus.request_stop, args=("preempted",), name="watchdog")
            watchdog.start()
            watchdog.join()

    bus = train(tmp_path / "thread.jsonl", from_a_watchdog)
    assert bus.step == 13  # the training thread acted on it at its next step
    (stop,) = [r for r in hookbus.read_event_log(tmp_path / "thread.jsonl") if r["record"] == "stop_requested"]
    assert stop["source"] == "thread watchdog"
    assert close_record(tmp_path / "thread.jsonl")["ended"] == "stopped"

    def sigterm(bus: hookbus.EventBus, step: int) -> None:
        if step == 7:
            os.kill(os.getpid(), signal.SIGTERM)  # `with bus:` turns it into a stop request

    bus = train(tmp_path / "sigterm.jsonl", sigterm)
    assert bus.step < 50
    assert close_record(tmp_path / "sigterm.jsonl")["ended"] == "stopped"
    assert handed_on == [signal.SIGTERM]


def test_a_stop_from_outside_after_the_runs_own_stop_still_finished(tmp_path: Path, handed_on: list[int]) -> None:
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(EventLogSink(tmp_path / "late.jsonl"))
    bus.attach(StopAtStepSink(last_step=20))  # a control sink: it asks first, in the same step
    bus.on("after_run", lambda e: os.kill(os.getpid(), signal.SIGTERM) if e.step == 20 else None)
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.run([{"loss": 1.0}] * 50)
    found = hookbus.read_event_log(tmp_path / "late.jsonl")
    assert [r["source"] for r in found if r["record"] == "stop_requested"] == ["StopAtStepSink", "signal"]
    assert close_record(tmp_path / "late.jsonl")["ended"] == "finished"  # the first request decides
    assert handed_on == [signal.SIGTERM]  # the process was still asked to end


@pytest.mark.parametrize(
    ("error", "ended"),
    [(ValueError("training code failed"), "crashed"), (KeyboardInterrupt(), "stopped")],
)
def test_an_exception_in_a_step_crashed_and_a_keyboard_interrupt_stopped(
    tmp_path: Path, error: BaseException, ended: str
) -> None:
    def fail(bus: hookbus.EventBus, step: int) -> None:
        if step == 9:
            raise error

    with pytest.raises(type(error)):
        train(tmp_path / "events.jsonl", fail, sinks=(StopAtStepSink(last_step=40),))
    found = hookbus.read_event_log(tmp_path / "events.jsonl")
    assert [r["record"] for r in found][-3:] == ["exception", "system", "close"]  # sampled after the exception
    assert found[-1]["step"] == 9
    assert found[-1]["ended"] == ended
