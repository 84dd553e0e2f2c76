"""Alerts from ``hookbus watch`` (issue 49 item 3): one per change of a run's state, sent from outside
the training processes to a real HTTP server on 127.0.0.1 and to a command, deduplicated across a
restart of the watcher, never holding the view, a webhook's secret never printed.

The runs are written by the real sinks: one trains in this process and finishes while watched; one
is a process SIGKILLed after its last flush (presumed dead once its log stays silent).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import hookbus
from hookbus.sinks import EventLogSink
from hookbus.testing import FakeClock, ScriptedPublisher

HERE = Path(__file__).parent


class Hooks:
    """A webhook receiver on 127.0.0.1: what it was POSTed, in order; ``hang`` holds every request."""

    def __init__(self, *, status: int = 200, hang: bool = False) -> None:
        self.received: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.arrived = threading.Condition()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if hang:
                    outer.release.wait(30)
                with outer.arrived:
                    outer.received.append(json.loads(body))
                    outer.paths.append(self.path)
                    outer.arrived.notify_all()
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T0KEN-s3cret"

    def wait_for(self, count: int, deadline: float = 60.0) -> list[dict[str, Any]]:
        until = time.monotonic() + deadline
        with self.arrived:
            while len(self.received) < count:
                left = until - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.received)} of {count} alerts arrived: {self.received}")
                self.arrived.wait(left)
            return list(self.received)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    receiver = Hooks()
    yield receiver
    receiver.close()


def killed_run(run: Path, lr: float) -> None:
    """A run whose process was SIGKILLed after its last flush: a log without a close."""
    code = f"import test_sweep, pathlib; test_sweep.train(pathlib.Path({str(run)!r}), {lr}, close=False)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr


class LiveRun:
    """A run training in this process, step by step, until :meth:`finish`."""

    def __init__(self, run: Path, lr: float) -> None:
        self.bus = hookbus.EventBus(clock=FakeClock(), handle_signals=False)
        self.sink = self.bus.attach(EventLogSink(run / "events.jsonl", hparams={"lr": lr}))
        self.bus.on("after_run", lambda e: None)
        self.pub = ScriptedPublisher(self.bus, keys=["loss"])
        self.bus.__enter__()
        self.pub.begin()
        self.pub.session(0)

    def steps(self, values: list[float]) -> None:
        for value in values:
            self.pub.advance({"loss": value})
        self.sink.flush()

    def finish(self) -> None:
        self.pub.end()
        self.bus.__exit__(None, None, None)


def seen(state: Path, run: str, word: str, deadline: float = 60.0) -> None:
    """Wait until the watcher's state file records ``run`` in state ``word`` (it has looked)."""
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        try:
            if json.loads(state.read_text())["runs"][run]["state"] == word:
                return
        except (FileNotFoundError, KeyError, ValueError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{state} never said {run} {word}")


def watcher(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hookbus", "watch", str(root), "--interval", "0.2", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
    )


def stop(process: subprocess.Popen[str]) -> tuple[str, str]:
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    return out, err


def test_a_finished_run_and_a_killed_one_each_give_one_alert_and_none_again_after_a_restart(
    tmp_path: Path, hooks: Hooks
) -> None:
    root = tmp_path / "runs"
    live = LiveRun(root / "lr-0.1", 0.1)
    live.steps([1.0, 0.5])
    killed_run(root / "lr-0.9", 0.9)
    commands = tmp_path / "alerts.jsonl"
    command = f"cat >> {commands} && echo >> {commands}"
    args = ("--alert-webhook", hooks.url, "--alert-command", command, "--dead-after", "3")
    first = watcher(root, *args)
    try:
        seen(root / ".hookbus-alerts.json", "lr-0.1", "live")  # the watcher has looked once
        live.steps([0.25, 0.125])
        live.finish()
        received = hooks.wait_for(2)
    finally:
        out, err = stop(first)
    by_run = {a["run"]: a for a in received}
    assert sorted(by_run) == ["lr-0.1", "lr-0.9"]
    assert by_run["lr-0.1"]["state"] == "finished"
    assert by_run["lr-0.1"]["step"] == 4
    assert by_run["lr-0.1"]["text"] == "hookbus: run lr-0.1 finished at step 4"
    assert by_run["lr-0.9"]["state"] == "presumed dead"
    assert by_run["lr-0.9"]["previous"] == "live"
    assert by_run["lr-0.9"]["hparams"]["lr"] == 0.9
    sent = [json.loads(line) for line in commands.read_text().splitlines() if line.strip()]
    assert sorted((a["run"], a["state"]) for a in sent) == [("lr-0.1", "finished"), ("lr-0.9", "presumed dead")]
    assert "s3cret" not in out + err

    again = watcher(root, *args, "--once")  # a restarted watcher: nothing changed since, nothing sent
    out, err = again.communicate(timeout=60)
    assert again.returncode == 6, err  # presumed dead is the worst state
    assert len(hooks.received) == 2
    state = json.loads((root / ".hookbus-alerts.json").read_text())
    assert state["runs"]["lr-0.1"]["state"] == "finished"


def test_a_first_look_does_not_announce_old_ends_but_a_run_that_ends_later_is_news(
    tmp_path: Path, hooks: Hooks
) -> None:
    from .test_sweep import train

    root = tmp_path / "runs"
    train(root / "old", 0.1)  # finished before any watcher looked
    live = LiveRun(root / "new", 0.2)
    live.steps([1.0])
    once = watcher(root, "--alert-webhook", hooks.url, "--once")
    assert once.communicate(timeout=60)[0]
    live.steps([0.5])
    live.finish()
    once = watcher(root, "--alert-webhook", hooks.url, "--once")  # as from cron: what changed since the last look
    once.communicate(timeout=60)
    assert [(a["run"], a["state"]) for a in hooks.received] == [("new", "finished")]


def test_a_webhook_that_hangs_or_refuses_costs_the_view_nothing_and_its_secret_is_never_printed(
    tmp_path: Path,
) -> None:
    from .test_sweep import train

    hanging = Hooks(hang=True)
    refusing = Hooks(status=500)
    try:
        root = tmp_path / "runs"
        live = LiveRun(root / "a", 0.1)
        live.steps([1.0])
        train(root / "b", 0.3)
        process = watcher(root, "--alert-webhook", hanging.url)
        seen(root / ".hookbus-alerts.json", "a", "live")
        live.finish()  # an alert to a webhook that never answers
        deadline = time.monotonic() + 60
        train(root / "c", 0.5)  # a new run appears and ends: the view says so while the webhook hangs
        lines: list[str] = []
        assert process.stdout is not None
        while time.monotonic() < deadline and "c: finished" not in lines:
            lines.append(process.stdout.readline().strip())
        assert "a: finished" in lines
        assert "c: finished" in lines  # the view went on
        out, err = stop(process)
        assert "T0KEN" not in out + err
        assert "s3cret" not in out + err

        refused = watcher(tmp_path / "runs", "--alert-webhook", refusing.url.replace("hooks", "other"), "--once")
        out, err = refused.communicate(timeout=120)
        assert "HTTP 500" in err  # said, with the host only
        assert "127.0.0.1" in err
        assert "T0KEN" not in out + err
        assert "s3cret" not in out + err
        assert len(refusing.received) == 0 or all(a["state"] == "finished" for a in refusing.received)
    finally:
        hanging.close()
        refusing.close()


def test_a_non_finite_value_and_a_stall_are_each_announced_once(tmp_path: Path, hooks: Hooks) -> None:
    from hookbus._watch._alerts import Alerter, Delivery
    from hookbus._watch._sweep import Sweep

    root = tmp_path / "runs"
    live = LiveRun(root / "a", 0.1)
    live.steps([1.0, math.nan, 0.5])
    now = [time.time()]
    alerter = Alerter(Delivery(url=hooks.url), tmp_path / "state.json", stalled_after=60, clock=lambda: now[0])
    sweep = Sweep(root, clock=lambda: now[0])
    try:
        alerter.observe(sweep.rows())
        alerter.observe(sweep.rows())
        received = hooks.wait_for(1)
        assert [(a["state"], a["detail"]) for a in received] == [("non-finite", "loss")]
        now[0] += 90  # no new step for 90 s; still live to the watcher (its dead_after is larger)
        sweep.dead_after = 1e9
        sweep.stale_after = 1e9
        alerter.observe(sweep.rows())
        alerter.observe(sweep.rows())
        received = hooks.wait_for(2)
        assert received[1]["state"] == "stalled"
        assert received[1]["detail"].startswith("no new step for ")
    finally:
        alerter.close()
        live.finish()
    time.sleep(0)  # nothing else comes: the count below is what was sent
    assert len(hooks.received) == 2


def test_bad_alert_options_fail_before_anything_is_watched(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hookbus", "watch", str(tmp_path), "--stalled-after", "0", "--alert-command", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--stalled-after" in done.stderr
