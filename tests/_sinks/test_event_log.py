"""EventLogSink, the log's reader and replay, driven by scripted steps (issue 18).

The real-training differential test (live CSV and TensorBoard against replayed ones) is in
``test_event_log_replay.py``; the SIGKILL test in ``reliability/test_event_log_kill.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hookbus
from hookbus.sinks import CSVSink, EarlyStoppingSink, EventLogSink, StopAtStepSink
from hookbus.testing import FakeClock, ScriptedPublisher


def values(step: int) -> dict[str, Any]:
    return {"loss": 1.0 / step, "accuracy": step / 100}


def records(path: Path, kind: str | None = None) -> list[dict[str, Any]]:
    found = hookbus.read_event_log(path)
    return [r for r in found if kind is None or r["record"] == kind]


def train_steps(path: Path, kind: str = "step") -> list[int]:
    return [r["step"] for r in records(path, kind) if r.get("mode", "train") == "train"]


def test_the_log_is_passive_it_fetches_nothing_more_and_records_what_the_others_got(tmp_path: Path) -> None:
    def run(with_log: bool) -> tuple[list[Any], list[Any]]:
        bus = hookbus.EventBus(clock=FakeClock())
        got: list[Any] = []
        bus.on("after_run", lambda e: got.append((e.step, dict(e.values))), every_n_steps=5, keys=["loss"])
        bus.attach(CSVSink(tmp_path / f"{with_log}.csv", every_n_steps=10))
        if with_log:
            bus.attach(EventLogSink(tmp_path / "events.jsonl"))
        pub = ScriptedPublisher(bus, keys=["loss", "accuracy", "grad_norm"])
        with bus:
            pub.run(values(s) | {"grad_norm": 2.0} for s in range(1, 31))
        return pub.fetched, got

    assert run(True) == run(False)  # the same fetches with and without the log
    fetched, _ = run(True)
    logged = [(r["step"], r["values"]) for r in records(tmp_path / "events.jsonl", "step")]
    # Every published step, with exactly the values fetched for the subscribers due there.
    assert [(s, tuple(v)) for s, v in logged] == [(s, tuple(k)) for s, k in fetched]
    assert logged[0] == (5, {"loss": 0.2})
    assert logged[1] == (10, {"loss": 0.1, "accuracy": 0.1, "grad_norm": 2.0})


def test_the_log_records_every_kind_of_event_with_its_format_version(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(EventLogSink(path, hparams={"lr": 0.1, "optimizer": "sgd"}))
    bus.attach(EarlyStoppingSink("eval/loss", patience=5))
    bus.attach(StopAtStepSink(last_step=20))
    bus.on("after_run", lambda e: 1 / 0 if e.step == 4 else None, every_n_steps=4, on_error="isolate", name="bad")
    pub = ScriptedPublisher(bus, keys=["loss"], shapes={"loss": ()})
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 100):
            if pub.advance({"loss": 1.0 / step}):
                break
            if step % 10 == 0:
                evaluate.evaluate({"loss": 2.0 / step}, step=step)
        pub.end()
    found = records(path)
    assert all(r["v"] == 1 for r in found)
    kinds = [r["record"] for r in found]
    assert kinds[:2] == ["begin", "session_created"]
    assert kinds[-3:] == ["end", "system", "close"]  # the machine's last sample, as the run closes
    assert {"step", "subscriber_error", "stop_requested", "status"} <= set(kinds)
    (sample,) = records(path, "system")
    assert sample["step"] == 20
    assert sample["notice"].startswith(("NVML absent", "no GPU"))
    assert isinstance(sample["values"]["system/process_memory_rss_megabytes"], float)
    begin = found[0]
    assert begin["keys"] == ["eval/loss", "loss"]
    assert begin["shapes"] == {"eval/loss": None, "loss": []}
    assert begin["total_steps"] == 20
    assert begin["hparams"] == {"lr": 0.1, "optimizer": "sgd"}
    assert found[1] | {"wall_time": 0} == {
        "v": 1,
        "record": "session_created",
        "step": 0,
        "wall_time": 0,
        "mode": "train",
        "restored": False,
        "rewound": False,
    }
    assert train_steps(path) == [4, 8, 12, 16, 20]  # the function's steps, and the stop-at-step's
    assert [(r["step"], r["values"]) for r in found if r.get("mode") == "eval" and r["record"] == "step"] == [
        (10, {"eval/loss": 0.2})
    ]  # the stop at 20 came before that step's evaluation
    (error,) = records(path, "subscriber_error")
    assert (error["subscriber"], error["step"], error["error"]) == ("bad", 4, "ZeroDivisionError: division by zero")
    (stop,) = records(path, "stop_requested")
    assert (stop["step"], stop["source"]) == (20, "StopAtStepSink")
    statuses = [r["sinks"] for r in records(path, "status")]
    assert statuses[0]["StopAtStepSink"] == "stop at step 20"
    assert "patience 0/5" in statuses[0]["EarlyStoppingSink"]


def test_pandas_reads_the_metric_columns_as_floats_nan_and_infinities_included(tmp_path: Path) -> None:
    pandas = pytest.importorskip("pandas")  # in the dev extra: this runs in CI
    path = tmp_path / "events.jsonl"
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(EventLogSink(path))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["loss", "accuracy"])
    script = [
        {"loss": 0.5, "accuracy": math.nan},
        {"loss": math.inf, "accuracy": 0.25},
        {"loss": -math.inf, "accuracy": 1},
    ]
    with bus:
        pub.run(script)
    assert "NaN" in path.read_text()
    assert "Infinity" in path.read_text()
    frame = pandas.read_json(path, lines=True)
    steps = frame[frame["record"] == "step"]
    assert str(frame["loss"].dtype) == "float64"
    assert str(frame["accuracy"].dtype) == "float64"
    assert steps["loss"].tolist() == [0.5, math.inf, -math.inf]
    assert math.isnan(steps["accuracy"].tolist()[0])
    assert steps["accuracy"].tolist()[1:] == [0.25, 1.0]
    # The reader gives the same floats.
    assert [r["values"]["loss"] for r in records(path, "step")] == [0.5, math.inf, -math.inf]


def test_arrays_are_summarised_bytes_skipped_and_keys_named_like_fields_nested(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(EventLogSink(path))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["weights", "summary", "record", "loss"])
    with bus:
        pub.run(
            [
                {
                    "weights": np.array([[1.0, np.nan], [3.0, 5.0]], dtype=np.float32),
                    "summary": b"\x00proto",
                    "record": 7.0,
                    "loss": 0.5,
                }
            ]
        )
    line = json.loads(next(ln for ln in path.read_text().splitlines() if '"record":"step"' in ln))
    assert line["loss"] == 0.5
    assert line["values"] == {"record": 7.0}
    assert line["arrays"] == {
        "weights": {"shape": [2, 2], "dtype": "float32", "nonfinite": 1, "min": 1.0, "max": 5.0, "mean": 3.0}
    }
    assert line["skipped"] == ["summary"]
    (step,) = records(path, "step")
    assert step["values"] == {"loss": 0.5, "record": 7.0}


def test_a_reader_never_takes_a_torn_last_line_as_data_and_fails_on_a_corrupt_one(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    first = hookbus.sink_api.event_log_line("close", step=3, wall_time=1.0)
    path.write_text(first + '{"v":1,"record":"step","step":4,"wall_ti')  # a write in progress
    assert records(path) == [{"v": 1, "record": "close", "step": 3, "wall_time": 1.0}]
    path.write_text(first + "not json\n" + first)
    with pytest.raises(ValueError, match=r"events.jsonl line 2 is not an event log record"):
        hookbus.read_event_log(path)
    path.write_text(first.replace('"v":1', '"v":2'))
    with pytest.raises(ValueError, match=r"format version 2; this hookbus reads up to 1"):
        hookbus.read_event_log(path)


def _session(
    path: Path,
    start: int,
    last: int,
    *,
    state: dict[str, Any] | None = None,
    restored: bool | None = None,
    checkpoint_at: int | None = None,
) -> dict[str, Any]:
    """One 'process': a new bus and sink, a session at ``start`` (loading ``state`` first, as a
    CheckpointSink does), steps to ``last``; returns the sink's state taken after a flush at
    ``checkpoint_at`` (the barrier's order)."""
    bus = hookbus.EventBus(clock=FakeClock())
    sink = bus.attach(EventLogSink(path))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["loss"])
    taken: dict[str, Any] = {}
    with bus:
        pub.begin()
        if state is not None:
            sink.load_state_dict(state)
        pub.session(start, restored)
        for step in range(start + 1, last + 1):
            pub.advance({"loss": float(step)})
            if step == checkpoint_at:
                sink.flush()
                taken = sink.state_dict()
        pub.end()
    return taken


def test_a_resume_cuts_the_log_back_to_the_checkpoints_state_in_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    state = _session(path, 0, 30, checkpoint_at=20)
    assert state["offset"] < path.stat().st_size
    inode = os.stat(path).st_ino
    _session(path, 20, 40, state=state)
    assert os.stat(path).st_ino != inode  # a follower sees a new file
    assert train_steps(path) == list(range(1, 41))  # each step once
    kinds = [r["record"] for r in records(path)]
    assert kinds.count("begin") == 2
    assert kinds.count("close") == 1
    assert [(r["step"], r["restored"]) for r in records(path, "session_created")] == [(0, False), (20, True)]


def test_without_a_state_a_resume_keeps_the_records_up_to_its_step_and_a_fresh_start_begins_anew(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    _session(path, 0, 30)
    _session(path, 25, 35)  # resumed (restored: step > 0) without a CheckpointSink's state
    assert train_steps(path) == list(range(1, 36))
    assert [r["record"] for r in records(path)].count("end") == 1  # the first run's end (at 30) is cut
    inode = os.stat(path).st_ino
    _session(path, 35, 36)  # nothing to cut: appended in place, the same file
    assert os.stat(path).st_ino == inode
    assert train_steps(path) == list(range(1, 37))
    _session(path, 0, 5)  # a fresh start
    assert train_steps(path) == [1, 2, 3, 4, 5]
    assert train_steps(path, "session_created") == [0]


def test_a_foreign_file_fails_before_step_1_and_bad_arguments_at_construction(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("step,wall_time,loss\n1,2.0,3.0\n")
    bus = hookbus.EventBus()
    bus.attach(EventLogSink(path))
    pub = ScriptedPublisher(bus, keys=["loss"])
    with pytest.raises(ValueError, match="exists and is not an event log"), bus:
        pub.begin()
    assert path.read_text() == "step,wall_time,loss\n1,2.0,3.0\n"
    with pytest.raises(ValueError, match=r"^flush_secs must be a positive finite number of seconds \(got 0\)$"):
        EventLogSink(tmp_path / "x.jsonl", flush_secs=0)
    with pytest.raises(ValueError, match="path must be a file, not a directory"):
        EventLogSink(tmp_path)
    with pytest.raises(ValueError, match="hparams must map names"):
        EventLogSink(tmp_path / "x.jsonl", hparams={"lr": [1]})  # type: ignore[dict-item]


def _live(tmp_path: Path, patience: int | None) -> hookbus.EventBus:
    """A scripted run with a CSV, an eval every 10 steps and a log; early stopping if ``patience``."""
    bus = hookbus.EventBus(clock=FakeClock(tick=0.001))
    bus.attach(CSVSink(tmp_path / "live.csv", every_n_steps=10))
    bus.attach(EventLogSink(tmp_path / "events.jsonl"))
    bus.on("after_run", lambda e: None, every_n_steps=3, keys=["loss"])  # more steps in the log
    if patience is not None:
        bus.attach(EarlyStoppingSink("eval/loss", patience=patience))
    pub = ScriptedPublisher(bus, keys=["loss", "accuracy"])
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    eval_loss = [5, 4, 3, 3.5, 3.2, 3.1, 3.3, 2.9, 3.0, 3.4, 3.6, 3.7]
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 121):
            if pub.advance(values(step)):
                break
            if step % 10 == 0:
                evaluate.evaluate({"loss": eval_loss[step // 10 - 1]}, step=step)
                if bus.should_stop:
                    break
        pub.end()
    return bus


def test_replay_gives_any_sink_what_it_got_live_and_tries_a_new_rule_on_the_past_run(tmp_path: Path) -> None:
    _live(tmp_path, patience=None)
    bus = hookbus.EventBus()
    bus.attach(CSVSink(tmp_path / "replayed.csv", every_n_steps=10))
    result = hookbus.replay(tmp_path / "events.jsonl", bus)
    assert (result.last_step, result.stopped) == (120, False)
    assert result.steps == len([s for s in range(1, 121) if s % 3 == 0 or s % 10 == 0])
    assert (tmp_path / "replayed.csv").read_text() == (tmp_path / "live.csv").read_text()  # wall times too
    assert (tmp_path / "replayed.eval.csv").read_text() == (tmp_path / "live.eval.csv").read_text()
    # A rule the run did not have: early stopping, as it would have stopped live.
    for patience in (0, 1, 2):
        bus = hookbus.EventBus()
        bus.attach(EarlyStoppingSink("eval/loss", patience=patience))
        replayed = hookbus.replay(tmp_path / "events.jsonl", bus)
        live = _live(tmp_path / f"live-{patience}", patience)
        assert replayed.stopped
        assert (replayed.stop_step, replayed.stop_reason) == (live.step, live.stop_reason)


def test_epoch_events_are_recorded_when_published_for_someone_and_replay_rebuilds_the_epoch_csv(
    tmp_path: Path,
) -> None:
    def run(epochs_csv: bool) -> list[dict[str, Any]]:
        log = tmp_path / f"{epochs_csv}.jsonl"
        bus = hookbus.EventBus(clock=FakeClock())
        if epochs_csv:
            bus.attach(CSVSink(tmp_path / "epochs.csv", epochs=True))
        bus.attach(EventLogSink(log))
        core = hookbus.publisher_api.PublisherCore(bus, ["loss"])
        with bus:
            core.begin()
            core.session_created(0)
            for epoch in range(3):
                core.advance(10 * (epoch + 1))
                core.publish_epoch(10 * (epoch + 1), {"epoch/loss": 1.0 / (epoch + 1), "epoch": float(epoch)})
            core.end(30)
        return [r for r in records(log, "step") if r["mode"] == "epoch"]

    assert run(False) == []  # published for nobody: not published, not recorded
    recorded = run(True)
    assert [(r["step"], r["values"]) for r in recorded][0] == (10, {"epoch/loss": 1.0, "epoch": 0.0})
    bus = hookbus.EventBus()
    bus.attach(CSVSink(tmp_path / "replayed.csv", epochs=True))
    hookbus.replay(tmp_path / "True.jsonl", bus)
    assert (tmp_path / "replayed.csv").read_text() == (tmp_path / "epochs.csv").read_text()


def test_an_evaluation_only_run_is_recorded_and_each_worker_can_have_its_own_log(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(EventLogSink(path))
    bus.on("after_run", lambda e: None, keys="eval/loss")
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    with bus:  # an evaluator task: eval sessions only
        evaluate.begin()
        evaluate.session(100)
        evaluate.evaluate({"loss": 0.5}, step=100)
        evaluate.end()
    kinds = [r["record"] for r in records(path) if r["record"] != "status"]
    assert kinds == ["begin", "session_created", "step", "end", "system", "close"]  # an evaluator samples too
    sink = EventLogSink(tmp_path / "events.jsonl", runs_on="each")
    sink.set_output_suffix("worker-1")
    assert sink.path == tmp_path / "events.worker-1.jsonl"


def test_what_is_published_for_nobody_is_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(EventLogSink(path))
    bus.on("before_run", lambda e: None, every_n_steps=2)  # due, but wants no values
    pub = ScriptedPublisher(bus, keys=["loss"])
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    with bus:
        pub.run([{"loss": 1.0}] * 4)
        evaluate.evaluate({"loss": 0.5}, step=4)
    assert records(path, "step") == []
    assert pub.fetched == [(2, ()), (4, ())]  # nothing fetched for the log either


def test_the_guides_pandas_call_reads_floats_and_wall_time_in_seconds_without_a_warning(tmp_path: Path) -> None:
    pandas = pytest.importorskip("pandas")  # in the dev extra: this runs in CI
    readme = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "watching-and-replay.md").read_text()
    calls = re.findall(r"`(pandas\.read_json\(path, lines=True[^`]*\))`", " ".join(readme.split()))
    call = calls[0] if int(pandas.__version__.split(".")[0]) >= 3 else calls[1]  # pandas 3's, then pandas 2's
    path = tmp_path / "events.jsonl"
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(EventLogSink(path))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.run([{"loss": 0.1 + 0.2}, {"loss": math.nan}])
    frame = eval(call, {"pandas": pandas, "path": path})  # warnings are errors here: a deprecated argument fails
    steps = frame[frame["record"] == "step"]
    recorded = records(path, "step")
    assert str(frame["wall_time"].dtype) == "float64"  # seconds, not dates
    assert steps["wall_time"].tolist() == [r["wall_time"] for r in recorded]
    assert steps["loss"].tolist()[0] == 0.1 + 0.2  # the last digit
    assert math.isnan(steps["loss"].tolist()[1])
