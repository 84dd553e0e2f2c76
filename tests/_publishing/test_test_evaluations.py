"""Test evaluations (``mode="test"``, ``test/<name>``) on the bus, without TensorFlow: who receives
them, and what the recording sinks make of them (issue 47 item 1; the Keras side is
``tests/_tf/keras/test_keras_evaluate.py``)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing import event_accumulator, event_file_loader

import hookbus
import hookbus.publisher_api
import hookbus.sink_api
from hookbus.sinks import CSVSink, EarlyStoppingSink, EventLogSink, NanGuardSink, StopAtStepSink, TensorBoardSink
from hookbus.testing import ScriptedPublisher


def _trained(bus: hookbus.EventBus, steps: int = 4) -> tuple[ScriptedPublisher, ScriptedPublisher]:
    """A train publisher and a test one on ``bus``; the train one trains ``steps`` steps (inside a run)."""
    train = ScriptedPublisher(bus, ["loss"])
    test = ScriptedPublisher(bus, ["loss"], mode="test")
    train.begin()
    train.session()
    for step in range(1, steps + 1):
        train.advance({"loss": 1.0 / step})
    return train, test


def test_a_test_evaluation_reaches_recorders_and_subscribers_naming_it_never_control_sinks() -> None:
    """keys=None and keys=["test/loss"] receive it once, as ``mode="test"`` at the step; keys=["loss"]
    does not; the NaN guard, early stopping and stop-at-step never see it (a non-finite test loss
    stops nothing); the event log observes it."""
    bus = hookbus.EventBus()
    got: dict[str, list[tuple[str, int, dict[str, float]]]] = {"all": [], "test": [], "train": []}
    for name, keys in (("all", None), ("test", ["test/loss"]), ("train", ["loss"])):
        bus.on("after_run", lambda e, name=name: got[name].append((e.mode, e.step, dict(e.values))), keys=keys)
    guard, stopper, early = NanGuardSink(), StopAtStepSink(last_step=4), EarlyStoppingSink("loss", mode="min")
    seen: list[Any] = []

    def watched(handler: Callable[[Any], None]) -> Callable[[Any], None]:
        def call(event: Any) -> None:
            seen.append(event.mode)
            handler(event)

        return call

    for sink in (guard, stopper, early):  # each sink's own handler, wrapped before it is attached
        sink.on_after_run = watched(sink.on_after_run)  # type: ignore[method-assign,assignment]
        bus.attach(sink)
    with bus:
        train, test = _trained(bus, steps=3)
        train.end()
        test.begin()
        test.evaluate({"loss": math.inf}, step=3)
        test.end()
    assert got["test"] == [("test", 3, {"test/loss": math.inf})]
    assert [e for e in got["all"] if e[0] == "test"] == got["test"]
    assert all(e[0] == "train" for e in got["train"])
    assert "train" in seen  # the wrapped handlers are the ones called
    assert "test" not in seen
    assert bus.stop_reason is None


def test_subscribers_naming_test_keys_pass_the_key_check_and_fetch_keys_cannot_take_the_prefix() -> None:
    bus = hookbus.EventBus()
    bus.on("after_run", lambda e: None, keys=["test/loss"])
    ScriptedPublisher(bus, ["loss"], mode="test")
    train = ScriptedPublisher(bus, ["loss"])
    with bus:
        train.begin()  # the key check passes
    with pytest.raises(
        ValueError, match=r"fetch key 'test/loss' must not start with 'test/'; a publisher in mode='test'"
    ):
        ScriptedPublisher(bus, ["test/loss"])
    assert hookbus.publisher_api.TEST_PREFIX == hookbus.sink_api.TEST_PREFIX == "test/"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_csv_test_file_keeps_every_evaluation_and_no_resume_drops_one(tmp_path: Path) -> None:
    """Two evaluations of step 4 are two rows of ``<stem>.test.csv``; a later session resumed at step 2
    drops the train rows after it, not the test rows; the train and eval files never get test values."""
    path = tmp_path / "m.csv"
    bus = hookbus.EventBus()
    bus.attach(CSVSink(path, every_n_steps=1))
    with bus:
        train, test = _trained(bus)
        train.end()
        test.begin()
        test.evaluate({"loss": 0.5}, step=4)
        test.evaluate({"loss": 0.25}, step=4)
        test.end()
        train.begin()
        train.session(step=2, restored=True)
        train.advance({"loss": 9.0})
        train.end()
    assert [(r["step"], r["loss"]) for r in _rows(tmp_path / "m.test.csv")] == [("4", "0.5"), ("4", "0.25")]
    assert [(r["step"], r["loss"]) for r in _rows(path)] == [("1", "1.0"), ("2", "0.5"), ("3", "9.0")]
    assert list(_rows(path)[0]) == ["step", "wall_time", "loss"]
    assert not (tmp_path / "m.eval.csv").exists()


def test_tensorboard_test_run_has_no_restart_marker_and_keeps_every_point(tmp_path: Path) -> None:
    """The default layout: a test evaluation goes to ``test/`` (tag without the prefix) at its step;
    no marker there, also when training's next session writes its own into ``train/``."""
    bus = hookbus.EventBus()
    bus.attach(TensorBoardSink(tmp_path, every_n_steps=1))
    with bus:
        train, test = _trained(bus)
        train.end()
        test.begin()
        test.evaluate({"loss": 0.5}, step=4)
        test.end()
        train.begin()
        train.session(step=4)
        train.advance({"loss": 0.1})
        train.end()
    test.begin()  # after the block: a run of its own
    test.evaluate({"loss": 0.25}, step=5)
    test.end()
    bus.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path / "test"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(4, 0.5), (5, 0.25)]
    markers = [
        e.step
        for f in sorted((tmp_path / "test").glob("events.out.tfevents.*"))
        for e in event_file_loader.LegacyEventFileLoader(str(f)).Load()
        if e.HasField("session_log")
    ]
    assert markers == []
    train_run = event_accumulator.EventAccumulator(str(tmp_path / "train"))
    train_run.Reload()
    assert [e.step for e in train_run.Scalars("loss")] == [1, 2, 3, 4, 5]


def test_event_log_records_a_test_evaluation_after_the_run_at_once(tmp_path: Path) -> None:
    """A test evaluation after the block opens a run of its own: its records are in the log when it
    ends (appended after the training's close record, with ``mode="test"``), not at interpreter exit."""
    log = tmp_path / "events.jsonl"
    bus = hookbus.EventBus()
    bus.attach(EventLogSink(log))
    bus.on("after_run", lambda e: None, keys=["test/loss"])
    with bus:
        train, test = _trained(bus)
        train.end()
    test.begin()
    test.evaluate({"loss": 0.5}, step=4)
    test.end()
    lines = [json.loads(line) for line in log.read_text().splitlines()]  # before bus.close()
    tested = [r for r in lines if r.get("mode") == "test" and r["record"] == "step"]
    assert [(r["step"], r["test/loss"]) for r in tested] == [(4, 0.5)]
    closed = [i for i, r in enumerate(lines) if r["record"] == "close"]
    assert closed  # the training's run
    assert closed[0] < lines.index(tested[0])
    bus.close()
