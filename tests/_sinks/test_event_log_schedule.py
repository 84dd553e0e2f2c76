"""EventLogSink's own schedule (issue 36 item 5), driven by scripted steps.

With ``every_n_steps`` / ``every_n_secs`` the log records, of the train steps published for the
others, those its schedule is due at; evaluations, epoch events, the at-end events and every
record that is not a step are kept whatever the schedule; a resumed session counts the schedule
from its step. Without a schedule it records every published step (the default, unchanged). The
real-training test (NanGuardSink every step, a log every 50 steps, replayed) is in
``tests/_publishing/test_event_log_replay.py``; the kill test in
``tests/reliability/test_event_log_kill.py``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

import hookbus
from hookbus.sink_api import CheckpointSaved
from hookbus.sinks import EventLogSink, StopAtStepSink
from hookbus.testing import FakeClock, ScriptedPublisher


def records(path: Path, kind: str | None = None) -> list[dict[str, Any]]:
    return [r for r in hookbus.read_event_log(path) if kind is None or r["record"] == kind]


def train_steps(path: Path) -> list[int]:
    """The train steps recorded, the at-end events left out."""
    return [r["step"] for r in records(path, "step") if r["mode"] == "train" and not r.get("final")]


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("every_n_steps", 0, "every_n_steps must be a positive int (got 0)"),
        ("every_n_steps", -5, "every_n_steps must be a positive int (got -5)"),
        ("every_n_steps", 2.5, "every_n_steps must be a positive int (got 2.5)"),
        ("every_n_steps", True, "every_n_steps must be a positive int (got True)"),
        ("every_n_secs", 0, "every_n_secs must be a positive finite number of seconds (got 0)"),
        ("every_n_secs", -1.0, "every_n_secs must be a positive finite number of seconds (got -1.0)"),
        ("every_n_secs", math.nan, "every_n_secs must be a positive finite number of seconds (got nan)"),
    ],
)
def test_bad_schedule_values_raise_at_construction_naming_the_argument_and_the_value(
    tmp_path: Path, argument: str, value: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        EventLogSink(tmp_path / "events.jsonl", **{argument: value})


def _run(tmp_path: Path, logs: dict[str, dict[str, Any]], *, last: int = 37) -> None:
    """A scripted run: a function due every step (as NanGuardSink is; it fails at step 7), a stop
    at ``last``, an evaluation every 10 steps, an at-end subscriber, a checkpoint record at step
    12; one log per entry of ``logs`` (name to arguments)."""
    bus = hookbus.EventBus(clock=FakeClock())
    for name, arguments in logs.items():
        bus.attach(EventLogSink(tmp_path / f"{name}.jsonl", name=name, **arguments))
    bus.attach(StopAtStepSink(last_step=last))
    bus.on("after_run", lambda e: None, at_end=True, keys=["loss"])
    bus.on("after_run", lambda e: 1 / 0 if e.step == 7 else None, on_error="isolate", name="bad")
    pub = ScriptedPublisher(bus, keys=["loss", "accuracy"])
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 100):
            stop = pub.advance({"loss": 1.0 / step, "accuracy": step / 100})
            if step == 12:
                pub.publish("checkpoint_saved", CheckpointSaved(str(tmp_path / "ckpt-12"), 12))
            if stop:
                break
            if step % 10 == 0:
                evaluate.evaluate({"loss": 2.0 / step}, step=step)
        pub.end({"loss": 0.5, "accuracy": 0.5})


def test_with_a_schedule_the_log_records_its_steps_and_keeps_every_other_record(tmp_path: Path) -> None:
    # "bad" (keys=None) is due every step: every step is published, as with NanGuardSink.
    _run(tmp_path, {"all": {}, "every5": {"every_n_steps": 5}})
    everything, thinned = tmp_path / "all.jsonl", tmp_path / "every5.jsonl"
    assert train_steps(everything) == list(range(1, 38))  # the default: every published step
    assert train_steps(thinned) == [5, 10, 15, 20, 25, 30, 35]
    step_records = {r["step"]: r for r in records(everything, "step") if r["mode"] == "train"}
    for record in records(thinned, "step"):  # the same records, with the values the others got
        if record["mode"] == "train" and not record.get("final"):
            assert record == step_records[record["step"]]

    def kept(path: Path) -> list[tuple[Any, ...]]:
        """Every record but the train steps, without wall times."""
        return [
            (r["record"], r.get("mode"), r["step"], r.get("final"), r.get("values"))
            for r in records(path)
            if not (r["record"] == "step" and r["mode"] == "train" and not r.get("final"))
        ]

    assert kept(thinned) == kept(everything)
    kinds = {r[0] for r in kept(thinned)}
    assert {"begin", "session_created", "subscriber_error", "checkpoint_saved", "stop_requested"} <= kinds
    assert {"status", "end", "close"} <= kinds
    assert [(r[1], r[2]) for r in kept(thinned) if r[0] == "step"] == [
        ("eval", 10),
        ("eval", 20),
        ("eval", 30),
        ("train", 37),  # the at-end event
    ]
    (stop,) = records(thinned, "stop_requested")
    assert stop["step"] == 37  # the stop's step, though no step record is there
    assert records(thinned, "close")[0]["step"] == 37


def test_a_schedule_picks_among_the_published_steps_and_never_adds_a_fetch(tmp_path: Path) -> None:
    # Published every 3 steps: a multiple of 5 nobody is due on is not published, so the first
    # step published after it is recorded (step // 5 grew since the last one recorded).
    def run(name: str, every: int | None) -> list[tuple[int, tuple[str, ...]]]:
        bus = hookbus.EventBus(clock=FakeClock())
        bus.attach(EventLogSink(tmp_path / f"{name}.jsonl", every_n_steps=5))
        if every is not None:
            bus.on("after_run", lambda e: None, every_n_steps=every, keys=["loss"])
        pub = ScriptedPublisher(bus, keys=["loss", "accuracy"])
        with bus:
            pub.run([{"loss": 1.0, "accuracy": 0.5}] * 30)
        return pub.fetched

    fetched = run("every3", 3)
    assert fetched == [(s, ("loss",)) for s in range(3, 31, 3)]  # the log adds no step and no key
    assert train_steps(tmp_path / "every3.jsonl") == [6, 12, 15, 21, 27, 30]
    assert run("alone", None) == []  # the log alone makes nothing due
    assert train_steps(tmp_path / "alone.jsonl") == []


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ({"every_n_secs": 4.0}, [1, 5, 9]),  # the first step seen, then 4 s after the last recorded
        ({"every_n_steps": 5, "every_n_secs": 3.0}, [1, 4, 5, 8, 10]),  # whichever comes first
    ],
)
def test_a_time_schedule_counts_the_buses_clock_from_the_last_step_recorded(
    tmp_path: Path, schedule: dict[str, Any], expected: list[int]
) -> None:
    clock = FakeClock()
    bus = hookbus.EventBus(clock=clock)
    bus.attach(EventLogSink(tmp_path / "events.jsonl", **schedule))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(12):
            clock.advance(1.0)  # step k runs at second k
            pub.advance({"loss": 1.0})
        pub.end()
    assert train_steps(tmp_path / "events.jsonl") == expected


def _process(
    path: Path, start: int, last: int, *, state: dict[str, Any] | None = None, checkpoint_at: int | None = None
) -> dict[str, Any]:
    """One 'process' with a log every 5 steps and a subscriber every step: a session at ``start``
    (``state`` loaded first, as CheckpointSink loads it), steps to ``last``; the state taken after a
    flush at ``checkpoint_at`` (the barrier's order)."""
    bus = hookbus.EventBus(clock=FakeClock())
    sink = bus.attach(EventLogSink(path, every_n_steps=5))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["loss"])
    taken: dict[str, Any] = {}
    with bus:
        pub.begin()
        if state is not None:
            sink.load_state_dict(state)
        pub.session(start, None if state is None else True)
        for step in range(start + 1, last + 1):
            pub.advance({"loss": float(step)})
            if step == checkpoint_at:
                sink.flush()
                taken = sink.state_dict()
        pub.end()
    return taken


def test_a_resumed_session_records_what_an_uninterrupted_run_records_each_step_once(tmp_path: Path) -> None:
    _process(tmp_path / "uninterrupted.jsonl", 0, 40)
    resumed = tmp_path / "resumed.jsonl"
    state = _process(resumed, 0, 33, checkpoint_at=22)  # "killed" at 33, checkpoint at 22
    _process(resumed, 22, 40, state=state)  # the schedule counts from 22: the next is 25, not 23
    expected = [5, 10, 15, 20, 25, 30, 35, 40]
    assert train_steps(tmp_path / "uninterrupted.jsonl") == expected
    assert train_steps(resumed) == expected
    # A rewind in one process (MonitoredSession re-creating its session at 22) counts from there too.
    rewound = tmp_path / "rewound.jsonl"
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(EventLogSink(rewound, every_n_steps=5))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(33):
            pub.advance({"loss": 1.0})
        pub.session(22)
        for _ in range(18):
            pub.advance({"loss": 1.0})
        pub.end()
    assert train_steps(rewound) == expected
