"""Issue 36 item 4, the watcher: how a run ended is one word, and one steps/s.

``hookbus watch`` takes the run's state from the ``close`` record's ``ended`` (the one rule,
:mod:`hookbus._contract._ending`), with that module's exit statuses (finished 0, crashed 1,
stopped 3); a log written before ``ended`` existed gets the same word from its stop and
exception records. The rate after "after T" and on the log's state line is the run's average.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hookbus
from hookbus._cli._cli import main
from hookbus._contract._event_log import event_log_line
from hookbus.sinks import EventLogSink, StopAtStepSink
from hookbus.testing import ScriptedPublisher


def _once(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str]:
    status = main(["watch", "--once", str(path)])
    return status, capsys.readouterr().out


def _state_line(out: str, name: str = "events.jsonl") -> str:
    return next(line for line in out.splitlines() if line.startswith(f"{name}: ") and " | step " in line)


def test_a_run_that_reached_stop_at_steps_last_step_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """StopAtStepSink stopped it at its last step: it did what it was asked (before: exit 3, stopped)."""
    log = tmp_path / "events.jsonl"
    bus = hookbus.EventBus()
    bus.attach(EventLogSink(log, flush_secs=0.1))
    bus.attach(StopAtStepSink(last_step=3))
    bus.on("after_run", every_n_steps=1)(lambda event: None)
    publisher = ScriptedPublisher(bus, ["loss"])
    with bus:
        publisher.begin()
        publisher.session()
        for step in range(1, 10):
            if publisher.advance({"loss": 1.0 / step}):
                break
        publisher.end()
    status, out = _once(capsys, log)
    assert status == 0
    assert _state_line(out).startswith("events.jsonl: finished | step 3")
    assert "events.jsonl: finished at step 3" in out  # the dashboard's summary says the same word


_PREEMPTED = """
import sys, time
import hookbus
from hookbus.sinks import EventLogSink
from hookbus.testing import ScriptedPublisher
bus = hookbus.EventBus()
bus.attach(EventLogSink(sys.argv[1], flush_secs=0.05))
bus.on("after_run", every_n_steps=1)(lambda event: None)
publisher = ScriptedPublisher(bus, ["loss"])
with bus:
    publisher.begin()
    publisher.session()
    for step in range(1, 100000):
        time.sleep(0.01)
        if publisher.advance({"loss": 1.0 / step}):
            break
    publisher.end()
"""


def test_a_run_preempted_by_sigterm_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real process training under ``with bus:`` gets SIGTERM (a preemption): it stops at a
    step, closes its log, and the watcher says stopped, exit 3."""
    log = tmp_path / "events.jsonl"
    child = subprocess.Popen([sys.executable, "-c", _PREEMPTED, str(log)])
    try:
        until = time.monotonic() + 60
        while not (log.exists() and '"record":"step"' in log.read_text()):
            assert time.monotonic() < until
            assert child.poll() is None
            time.sleep(0.05)
        child.terminate()
        # A graceful stop, then the process ends as SIGTERM asked, once its log is closed.
        assert child.wait(timeout=60) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    status, out = _once(capsys, log)
    assert status == 3
    assert _state_line(out).startswith("events.jsonl: stopped | step ")
    assert "(signal, step " in _state_line(out)


def test_a_crashed_run_crashed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "events.jsonl"
    bus = hookbus.EventBus()
    bus.attach(EventLogSink(log, flush_secs=0.1))
    bus.on("after_run", every_n_steps=1)(lambda event: None)
    publisher = ScriptedPublisher(bus, ["loss"])

    def train() -> None:
        with bus:
            publisher.begin()
            publisher.session()
            publisher.advance({"loss": 1.0})
            raise RuntimeError("boom at 2")

    with pytest.raises(RuntimeError):
        train()
    status, out = _once(capsys, log)
    assert status == 1
    assert _state_line(out).startswith("events.jsonl: crashed | step 1")
    assert "RuntimeError: boom at 2" in _state_line(out)


def _older_log(path: Path, *tail: str) -> None:
    """A log as written before the close record said how the run ended: no ``ended``."""
    lines = [
        event_log_line("begin", step=0, wall_time=0.0, mode="train", keys=["loss"], flush_secs=0.1),
        event_log_line("session_created", step=0, wall_time=0.0, mode="train", restored=False, rewound=False),
        *(event_log_line("step", step=s, wall_time=s * 0.1, mode="train", loss=1.0 / s) for s in range(1, 6)),
        *tail,
        event_log_line("end", step=5, wall_time=0.6, mode="train"),
        event_log_line("close", step=5, wall_time=0.7),
    ]
    path.write_text("".join(lines))


def _stop(source: str) -> str:
    return event_log_line("stop_requested", step=5, wall_time=0.5, reason="asked", source=source)


def _exception(error: str) -> str:
    return event_log_line("exception", step=5, wall_time=0.5, error=error)


@pytest.mark.parametrize(
    ("tail", "word", "status"),
    [
        ((), "finished", 0),
        ((_stop("StopAtStepSink"),), "finished", 0),
        ((_stop("EarlyStoppingSink"),), "finished", 0),
        ((_stop("user"),), "finished", 0),
        ((_stop("cluster"),), "finished", 0),
        ((_stop("signal"),), "stopped", 3),
        ((_stop("thread 140245 (watchdog)"),), "stopped", 3),
        ((_exception("KeyboardInterrupt"),), "stopped", 3),
        ((_stop("signal"), _exception("KeyboardInterrupt")), "stopped", 3),
        ((_exception("RuntimeError: boom"),), "crashed", 1),
        ((_stop("StopAtStepSink"), _exception("RuntimeError: boom")), "crashed", 1),
    ],
)
def test_a_log_without_ended_gets_the_same_word_from_its_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tail: tuple[str, ...], word: str, status: int
) -> None:
    """An older log (no ``ended``): the one rule on its first stop's source and its exception
    (before: any stop said stopped, exit 3; a KeyboardInterrupt said crashed, exit 1)."""
    log = tmp_path / "events.jsonl"
    _older_log(log, *tail)
    got, out = _once(capsys, log)
    assert (got, _state_line(out).split(" | ")[0]) == (status, f"events.jsonl: {word}")


@pytest.mark.parametrize(("ended", "status"), [("finished", 0), ("stopped", 3), ("crashed", 1)])
def test_the_close_records_word_is_the_runs_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ended: str, status: int
) -> None:
    """Where the close record says how the run ended, that word is the state, whatever the
    records before it would suggest to an older reader (here a subscriber's stop)."""
    log = tmp_path / "events.jsonl"
    _older_log(log, _stop("StopAtStepSink"))
    text = log.read_text().replace(
        '"record":"close","step":5,"wall_time":0.7}', f'"record":"close","step":5,"wall_time":0.7,"ended":"{ended}"}}'
    )
    log.write_text(text)
    got, out = _once(capsys, log)
    assert (got, _state_line(out).split(" | ")[0]) == (status, f"events.jsonl: {ended}")


def test_the_rate_after_the_elapsed_time_and_on_the_state_line_is_the_runs_average(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """10 s of start-up, then 100 steps at 100 steps/s, closed at 11 s: the run's average is
    100 / 11 = 9.1 steps/s, in the summary after "after T" and on the log's line (before: the
    line said 100.0 steps/s, the recent rate, unlabelled); the recent rate says recent."""
    lines = [
        event_log_line("begin", step=0, wall_time=1000.0, mode="train", keys=["loss"], flush_secs=0.1),
        event_log_line("session_created", step=0, wall_time=1010.0, mode="train", restored=False, rewound=False),
        *(
            event_log_line("step", step=s, wall_time=1010.0 + s * 0.01, mode="train", loss=1.0 / s)
            for s in range(1, 101)
        ),
        event_log_line("end", step=100, wall_time=1011.0, mode="train"),
        event_log_line("close", step=100, wall_time=1011.0, ended="finished"),
    ]
    log = tmp_path / "events.jsonl"
    log.write_text("".join(lines))
    status, out = _once(capsys, log)
    assert status == 0
    summary = re.search(r"finished at step 100 after 0:00:11 \(([\d.,]+) steps/s\)", out)
    assert summary is not None, out
    assert summary[1] == "9.1"
    assert " | 9.1 steps/s | " in _state_line(out)
    assert "recent 100.0 steps/s" in out  # the dashboard's progress line: the recent rate, said so
