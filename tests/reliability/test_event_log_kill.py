"""The event log across SIGKILL and resume (issue 18): a child trains with CheckpointSink and
EventLogSink (and CSV, TensorBoard, early stopping), is killed at a step after a checkpoint,
inside a checkpoint's barrier and at a random moment, and restarts each time; in the end every
step's record is in the log exactly once, with the values the CSV holds for it. A second log on
its own schedule (``every_n_steps=10``, issue 36) holds each tenth step once, and the rest as the
first; the finishing process's close says ``ended: finished``. The summary beside each log, behind it
after a kill by what the kill cut short, reads as the log says, and covers it whole after the close."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest
from _summaries import fold, same, shown

import hookbus
from hookbus.sink_api import run_summary_path

from ._helpers import csv_column, latest_checkpoint_step, run_child

pytestmark = [pytest.mark.reliability, pytest.mark.subprocess]

LAST = 120


def test_each_step_is_in_the_event_log_exactly_once_after_kills_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKBUS_TEST_EVENT_LOG", "1")
    monkeypatch.setenv("HOOKBUS_TEST_EVENT_LOG_EVERY", "10")
    log = tmp_path / "events.jsonl"
    every_10 = tmp_path / "events.every-10.jsonl"  # EventLogSink(every_n_steps=10) in the same runs
    kills = ["step:60", "checkpoint:100", f"timer:{random.Random(18).randrange(100, 400)}"]
    resumed_at = [0]
    inodes = []
    for gen, kill in enumerate(kills):
        result = run_child(tmp_path, LAST, gen, kill)
        if not kill.startswith("timer") or result.returncode != 0:  # a late timer may find the run done
            assert result.returncode == -signal.SIGKILL, (kill, result.stderr[-3000:])
        resumed_at.append(latest_checkpoint_step(tmp_path / "ckpt") or 0)
        inodes.append(os.stat(log).st_ino)
        hookbus.read_event_log(log)  # readable after every kill: a torn last line is no record
        hookbus.read_event_log(every_10)
        for path in (log, every_10):  # the summary, behind the log by what the kill cut short, caught up
            assert same(shown(hookbus.read_run_summary(path)), fold(path)), (kill, path)
    assert resumed_at[1:3] == [50, 75]  # killed at 60 after the save at 50; inside the save at 100
    final = run_child(tmp_path, LAST, len(kills))
    assert final.returncode == 0, final.stderr[-3000:]

    for path in (log, every_10):  # the close left a summary of the whole log: a reader reads nothing more
        stored = json.loads(run_summary_path(path).read_text())
        assert stored["log_size"] == path.stat().st_size
        assert same(shown(hookbus.RunSummary.from_dict(stored)), fold(path))
        assert stored["ended"] == "finished"
        assert stored["step"] == LAST
    records = hookbus.read_event_log(log)
    steps = [r for r in records if r["record"] == "step" and r["mode"] == "train" and not r.get("final")]
    assert [r["step"] for r in steps] == list(range(1, LAST + 1))  # each step exactly once, in order
    loss = csv_column(tmp_path / "metrics.csv", "loss")
    assert {r["step"]: r["values"]["loss"] for r in steps} == loss  # the same values as the CSV
    sessions = [(r["step"], r["restored"]) for r in records if r["record"] == "session_created"]
    assert sessions[0] == (0, False)
    assert [s for s, _ in sessions] == sorted(s for s, _ in sessions)  # the timeline never goes back
    assert all(restored for _, restored in sessions[1:])
    assert [s for s, _ in sessions][:3] == [0, 50, 75]
    saved = [r["step"] for r in records if r["record"] == "checkpoint_saved"]
    assert saved == sorted(set(saved))  # each checkpoint once
    assert {25, 50, 75, LAST} <= set(saved)  # the one restored from kept too (100: the timer's run may die in it)
    assert [r["record"] for r in records].count("close") == 1  # only the finishing process closed
    assert [r["record"] for r in records][-1] == "close"
    assert inodes[0] != inodes[1]  # a resume's cut is a new file: a follower notices
    assert records[-1]["ended"] == "finished"  # the last process reached StopAtStepSink's last step

    thinned = hookbus.read_event_log(every_10)
    steps = [r for r in thinned if r["record"] == "step" and r["mode"] == "train" and not r.get("final")]
    assert [r["step"] for r in steps] == list(range(10, LAST + 1, 10))  # on its schedule, each once
    assert all(r["values"]["loss"] == loss[r["step"]] for r in steps)
    # Everything else as the log without a schedule has it: the begins, sessions, stop, ends, close.
    others = ("step", "status", "checkpoint_saved")  # a kill may fall between the two logs' checkpoint records
    assert [(r["record"], r["step"]) for r in thinned if r["record"] not in others] == [
        (r["record"], r["step"]) for r in records if r["record"] not in others
    ]
    saved = [r["step"] for r in thinned if r["record"] == "checkpoint_saved"]
    assert saved == sorted(set(saved))
    assert {25, 50, 75, LAST} <= set(saved)
    close = thinned[-1] | {"wall_time": 0}
    assert close == {"v": 1, "record": "close", "step": LAST, "wall_time": 0, "ended": "finished"}
