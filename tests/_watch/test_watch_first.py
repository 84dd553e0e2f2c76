"""Issue 36 item 3: ``hookbus watch PATH`` started before the run, PATH not there yet.

A real watcher process (``python -m hookbus._cli._cli watch``, plain output through a pipe) is
started first; the directory appears, then a real EventLogSink writes its log in it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import hookbus
from hookbus.sinks import EventLogSink
from hookbus.testing import ScriptedPublisher


def _record(log: Path, steps: int) -> None:
    """A run of ``steps`` steps (loss 1/step) recorded by the real EventLogSink in ``log``."""
    bus = hookbus.EventBus()
    bus.attach(EventLogSink(log, flush_secs=0.1))
    bus.on("after_run", every_n_steps=1)(lambda event: None)
    publisher = ScriptedPublisher(bus, ["loss"])
    with bus:
        publisher.begin()
        publisher.session()
        for step in range(1, steps + 1):
            publisher.advance({"loss": 1.0 / step})
        publisher.end()


def _start(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hookbus._cli._cli", "watch", str(path), "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize("watched", ["runs/demo", "runs/demo/events.jsonl"])
def test_a_watcher_started_before_its_directory_exists_waits_then_follows_the_log_in_it(
    tmp_path: Path, watched: str
) -> None:
    """``hookbus watch runs/demo`` before ``runs/demo`` exists: it waits; the directory appears
    (empty for a while, as a trainer makes it before its first record), then the log in it is
    followed to its close, exit 0. (Before: ``IsADirectoryError``, exit 1, the moment the
    directory appeared.) The same holds for a log path whose directory does not exist yet."""
    directory = tmp_path / "runs" / "demo"
    watcher = _start(tmp_path / watched)
    try:
        assert watcher.stdout is not None
        assert watcher.stdout.readline().startswith(f"waiting for {tmp_path / watched}")
        directory.mkdir(parents=True)
        time.sleep(0.5)  # several polls see the directory, still without a log
        assert watcher.poll() is None, watcher.stdout.read()
        _record(directory / "events.jsonl", steps=6)
        out, _ = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0, out
    assert "Traceback" not in out
    assert "events.jsonl: finished at step 6" in out  # ConsoleSink's closing summary, from the log
    assert "events.jsonl: finished" in out.splitlines()  # the log's state line
