"""SIGINT, SIGTERM and an exception from the training code, in a real training process.

Every subscriber is closed, files are flushed, the terminal is restored, ``exception`` is
published (not for SIGTERM, which is a clean stop), and the user's exception surfaces unchanged;
SIGTERM ends the run with a final checkpoint, then the process as SIGTERM asks (issue 45 item 4:
the process used to go on past ``with bus:``, as if its training had finished).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import pyte
import pytest
from _pty import PtyResult, run_in_pty

from ._helpers import CHILD, csv_rows, latest_checkpoint_step, read_log, scalars, sigterm_child

pytestmark = [pytest.mark.reliability, pytest.mark.subprocess]

SINKS = {"EarlyStoppingSink", "CheckpointSink", "CSVSink", "TensorBoardSink", "StopAtStepSink", "ConsoleSink"}
FOREVER = 10**6


def _argv(directory: Path, mode: str) -> list[str]:
    return [sys.executable, str(CHILD), str(directory), str(FOREVER), "0", mode]


def _files_hold_every_step_to(directory: Path, last: int) -> None:
    header, rows = csv_rows(directory / "metrics.csv")
    assert [int(r[0]) for r in rows] == list(range(1, last + 1))
    assert [s for s, _ in scalars(directory / "tb" / "train", "loss")] == list(range(1, last + 1))


def _closed(log: list[dict[str, Any]]) -> list[str]:
    return [e["sink"] for e in log if e["event"] == "closed"]


def _everything_shown(result: PtyResult) -> str:
    """The rows that scrolled off the top of the terminal, then its screen, one row per line.

    ``result.text`` is the last screenful only (no scrollback): TensorFlow's start-up notices (some
    CPUs only) and a traceback whose length depends on where the signal lands can scroll the dashboard
    or the traceback's start out of it. The assertions must not depend on how many lines came first.
    """
    screen = pyte.HistoryScreen(result.screen.columns, result.screen.lines, history=100_000)
    pyte.ByteStream(screen).feed(result.output)
    scrolled = ["".join(row[x].data for x in range(screen.columns)).rstrip() for row in screen.history.top]
    return "\n".join([*scrolled, *(row.rstrip() for row in screen.display)])


def test_the_first_ctrl_c_stops_with_a_final_checkpoint_then_the_program_ends_interrupted(tmp_path: Path) -> None:
    result = run_in_pty(_argv(tmp_path, "signal"), cols=110, rows=50, timeout=120, interrupt_on=b"marker")
    text = _everything_shown(result)
    assert result.interrupted
    assert result.returncode == -signal.SIGINT, text  # the exit status still says interrupted
    assert result.cursor_visible
    assert "(stopped)" in text
    assert "KeyboardInterrupt: stopped gracefully after Ctrl-C" in text
    log = read_log(tmp_path)
    assert not [e for e in log if e["event"] == "exception"]  # a stop, not a failure
    (stop,) = [e for e in log if e["event"] == "stop"]
    assert stop["reason"] == "received SIGINT"
    assert sorted(_closed(log)) == sorted(SINKS)  # each exactly once
    assert not any(e["event"] == "done" for e in log)  # the program did not go on after the run
    # The run ended at the step that saw the signal: the final checkpoint holds it, and every
    # step up to it is in the CSV and in TensorBoard.
    header, rows = csv_rows(tmp_path / "metrics.csv")
    last = int(rows[-1][0])
    assert last == stop["step"] == latest_checkpoint_step(tmp_path / "ckpt")
    _files_hold_every_step_to(tmp_path, last)


def test_an_exception_from_the_training_code_surfaces_unchanged_and_closes_everything(tmp_path: Path) -> None:
    result = run_in_pty(_argv(tmp_path, "exception"), cols=110, rows=50, timeout=120)
    text = _everything_shown(result)
    assert result.returncode == 1, text
    assert result.cursor_visible
    assert "(crashed)" in text
    assert "ValueError: training code failed at step 30" in text
    assert 'raise ValueError(f"training code failed at step {bus.step}")' in text  # the user's frame
    log = read_log(tmp_path)
    (exception,) = [e for e in log if e["event"] == "exception"]
    assert (exception["step"], exception["error"]) == (30, repr(ValueError("training code failed at step 30")))
    assert sorted(_closed(log)) == sorted(SINKS)
    _files_hold_every_step_to(tmp_path, 30)


def test_sigterm_during_a_step_stops_cleanly_with_a_final_checkpoint_then_ends_the_process(tmp_path: Path) -> None:
    proc = sigterm_child(tmp_path, 0, last_step=FOREVER)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == -signal.SIGTERM, err[-3000:]  # the exit status says terminated
    log = read_log(tmp_path)
    (stop,) = [e for e in log if e["event"] == "stop"]
    step = stop["step"]
    assert step >= 30
    assert stop["reason"] == "received SIGTERM"
    assert not any(e["event"] == "exception" for e in log)
    assert sorted(_closed(log)) == sorted(SINKS)  # everything written and closed first
    assert not any(e["event"] == "done" for e in log)  # the program did not go on after the run
    assert latest_checkpoint_step(tmp_path / "ckpt") == step  # the final checkpoint
    _files_hold_every_step_to(tmp_path, step)
    assert "done at step" not in out
    assert f"stopped at step {step}" in out  # the plain dashboard's summary
