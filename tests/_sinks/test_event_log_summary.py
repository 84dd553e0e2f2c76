"""The summary beside each event log (issue 49 item 1): a run's row without reading its log.

Checked against a fold of the log written here, independent of hookbus's (:func:`fold`): the summary
on disk after a close covers the whole log and says what the log says; a reader given a summary
that lags folds only the records after it; a summary of another file (a cut's new log, a damaged or
missing one, an older log) is rebuilt from the log; a resume cuts the summary with the log.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from _summaries import fold, same, shown

import hookbus
from hookbus.sink_api import run_summary_path
from hookbus.sinks import EventLogSink, StopAtStepSink
from hookbus.testing import FakeClock, ScriptedPublisher


def on_disk(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(run_summary_path(path).read_text())
    return data


def loss(step: int) -> float:
    if step == 17:
        return math.nan
    return 1.0 + (step - 23) ** 2 / 100  # best at step 23


def run(
    path: Path,
    start: int,
    last: int,
    *,
    state: dict[str, Any] | None = None,
    checkpoint_at: int | None = None,
    values: Any = loss,
    snapshot_at: int | None = None,
    hparams: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One 'process' training from ``start`` to ``last`` with an eval every 10 steps; returns the
    sink's state after a flush at ``checkpoint_at``; copies the summary as of a flush at
    ``snapshot_at`` to ``<path>.snapshot``."""
    bus = hookbus.EventBus(clock=FakeClock())
    sink = bus.attach(EventLogSink(path, hparams=hparams if hparams is not None else {"lr": 0.1, "opt": "sgd"}))
    bus.on("after_run", lambda e: None)
    bus.attach(StopAtStepSink(last_step=last))
    pub = ScriptedPublisher(bus, keys=["loss", "accuracy"])
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    taken: dict[str, Any] = {}
    with bus:
        pub.begin()
        if state is not None:
            sink.load_state_dict(state)
        pub.session(start, start > 0)
        for step in range(start + 1, last + 10):
            if pub.advance({"loss": values(step), "accuracy": step / 100}):
                break
            if step % 10 == 0:
                evaluate.evaluate({"loss": 2 * values(step)}, step=step)
            if step in (checkpoint_at, snapshot_at):
                sink.flush()
                if step == checkpoint_at:
                    taken = sink.state_dict()
                if step == snapshot_at:
                    shutil.copy(run_summary_path(path), f"{path}.snapshot")
        pub.end()
    return taken


def test_the_summary_after_a_close_covers_the_whole_log_and_says_what_it_says(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    run(path, 0, 40)
    stored = on_disk(path)
    assert stored["log_size"] == path.stat().st_size  # nothing left for a reader to read
    assert stored["log_inode"] == path.stat().st_ino
    summary = hookbus.read_run_summary(path)
    expected = fold(path)
    assert same(shown(summary), expected)
    assert expected["best"]["loss"] == (23, 1.0)
    assert expected["nonfinite"] == {"loss": 1}  # step 17's NaN: latest at 17, never best
    assert expected["ended"] == "finished"
    assert expected["hparams"] == {"lr": 0.1, "opt": "sgd"}
    assert summary.step == 40
    assert summary.keys["eval/loss"].best_step == 20  # 2 * loss: 20 nearer 23 than 30
    assert summary.keys["accuracy"].direction == "max"
    assert summary.keys["accuracy"].best_step == 40
    assert summary.rate is not None
    assert summary.rate > 0


def test_a_reader_folds_only_the_records_after_a_summary_that_lags(tmp_path: Path) -> None:
    """The summary as of step 20 put back, with a mark the log cannot have: the reader keeps the
    mark (it read the summary, not the log's first 20 steps) and still ends at step 40 with
    the log's latest and best (it folded the records after the summary)."""
    path = tmp_path / "events.jsonl"
    run(path, 0, 40, snapshot_at=20)
    lagging = json.loads(Path(f"{path}.snapshot").read_text())
    assert 0 < lagging["log_size"] < path.stat().st_size
    lagging["hparams"] = {"marked": True}
    run_summary_path(path).write_text(json.dumps(lagging))
    summary = hookbus.read_run_summary(path)
    assert summary.hparams == {"marked": True}
    assert same({**shown(summary), "hparams": None}, {**fold(path), "hparams": None})


@pytest.mark.parametrize("damage", ["missing", "torn", "newer", "another log", "same inode, other bytes"])
def test_a_summary_that_does_not_fit_the_log_is_rebuilt_from_it(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "events.jsonl"
    run(path, 0, 40)
    target = run_summary_path(path)
    stored = on_disk(path)
    if damage == "missing":  # a log written before summaries existed
        target.unlink()
    elif damage == "torn":
        target.write_text(target.read_text()[:50])
    elif damage == "newer":
        target.write_text(json.dumps({**stored, "v": 99, "hparams": {"marked": True}}))
    elif damage == "another log":  # a resume's cut replaced the log; this summary was of the old one
        target.write_text(json.dumps({**stored, "log_inode": stored["log_inode"] + 1, "hparams": {"marked": True}}))
    else:  # a new file that reused the old one's inode number
        text = path.read_bytes()
        path.write_bytes(text.replace(b'"lr":0.1', b'"lr":0.25'))  # one byte longer: its bytes moved
        assert path.stat().st_ino == stored["log_inode"]
    summary = hookbus.read_run_summary(path)
    assert same(shown(summary), fold(path))
    if damage == "same inode, other bytes":
        assert summary.hparams == {"lr": 0.25, "opt": "sgd"}


def test_a_resume_cuts_the_summary_with_the_log(tmp_path: Path) -> None:
    """Trained to 30 with a checkpoint's state at 20; the best loss was at 23. Resumed from 20 with
    other values (best now at 35): the best at 23 is gone with the records the cut dropped, in
    the summary on disk as in the log. The checkpoint's state carried the summary."""
    path = tmp_path / "events.jsonl"
    state = run(path, 0, 30, checkpoint_at=20)
    assert state["summary"]["step"] == 20
    inode = path.stat().st_ino
    run(path, 20, 40, state=state, values=lambda step: 1.0 + abs(step - 35) / 10)
    assert path.stat().st_ino != inode
    stored = on_disk(path)
    assert stored["log_size"] == path.stat().st_size
    expected = fold(path)
    assert expected["best"]["loss"] == (35, 1.0)
    assert expected["nonfinite"] == {"loss": 1}  # step 17, before the cut, kept
    assert same(shown(hookbus.RunSummary.from_dict(stored)), expected)


def test_a_resume_without_a_state_and_a_fresh_start_cut_the_summary_too(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    run(path, 0, 30)
    run(path, 25, 35, values=lambda step: 5.0)  # no state: keeps the records up to 25
    assert same(shown(hookbus.RunSummary.from_dict(on_disk(path))), fold(path))
    assert on_disk(path)["keys"]["loss"]["best_step"] == 23
    run(path, 35, 36, values=lambda step: 0.5)  # nothing cut: appended, the summary read and extended
    assert same(shown(hookbus.RunSummary.from_dict(on_disk(path))), fold(path))
    assert on_disk(path)["keys"]["loss"]["best_step"] == 36
    run(path, 0, 5, hparams={"lr": 0.3})  # a fresh start: a new log, a new summary
    summary = hookbus.RunSummary.from_dict(on_disk(path))
    assert same(shown(summary), fold(path))
    assert summary.step == 5
    assert summary.hparams == {"lr": 0.3}


def test_a_live_run_is_summarized_at_each_flush_without_an_end(tmp_path: Path) -> None:
    """Mid-run, after a flush: the summary says no end word and the newest step flushed."""
    path = tmp_path / "events.jsonl"
    bus = hookbus.EventBus(clock=FakeClock())
    sink = bus.attach(EventLogSink(path))
    bus.on("after_run", lambda e: None)
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 13):
            pub.advance({"loss": 1.0 / step})
        sink.flush()
        stored = on_disk(path)
        assert stored["ended"] is None
        assert stored["step"] == 12
        assert stored["log_size"] == path.stat().st_size
        assert same(shown(hookbus.read_run_summary(path)), fold(path))
        pub.end()
    assert on_disk(path)["ended"] == "finished"


def test_the_summary_is_written_with_the_logs_permissions_and_no_temp_files_stay(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    run(path, 0, 10)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert {"events.jsonl", "events.summary.json"} <= {p.name for p in tmp_path.iterdir()}
    assert os.stat(run_summary_path(path)).st_mode & 0o777 == os.stat(path).st_mode & 0o777
