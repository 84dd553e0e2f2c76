"""The machine's samples in every view (no TensorFlow): the event log, TensorBoard's ``system`` run,
``CSVSink(system=True)``'s file and the dashboard's machine line; a replay carries them.

A stall is scripted: two samples published while the step stays at 3 (``sample_system``, on the
test's thread: no sleeps), then the run's last sample as it closes.
"""

from __future__ import annotations

import csv
import io
import socket
from pathlib import Path
from typing import Any

from _tb import runs
from rich.console import Console

import hookbus
from hookbus.sinks import ConsoleSink, CSVSink, EventLogSink, TensorBoardSink
from hookbus.testing import FakeClock, ScriptedPublisher

START = 1_800_000_000.0  # the wall clock: one second more at every reading


def _stalled_run(tmp_path: Path, **bus_options: Any) -> tuple[hookbus.EventBus, io.StringIO]:
    """Steps 1-3, two samples at step 3 (a stall), the run's last sample at close."""
    screen = io.StringIO()
    bus = hookbus.EventBus(wall_clock=FakeClock(START, tick=1.0), system_metrics=3600.0, **bus_options)
    bus.attach(EventLogSink(tmp_path / "events.jsonl"))
    bus.attach(TensorBoardSink(tmp_path / "tb", every_n_steps=1, system=True))
    bus.attach(CSVSink(tmp_path / "metrics.csv", every_n_steps=1, system=True))
    bus.attach(ConsoleSink(Console(file=screen, width=300), live=False, plain_every_n_secs=0))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(3):
            pub.advance({"loss": 1.0 / (step + 1)})
        pub.sample_system()
        pub.sample_system()
        pub.end()
    return bus, screen


def test_the_event_log_holds_each_sample_with_the_step_it_was_taken_at(tmp_path: Path) -> None:
    _stalled_run(tmp_path)
    records = hookbus.read_event_log(tmp_path / "events.jsonl")
    samples = [r for r in records if r["record"] == "system"]
    assert [s["step"] for s in samples] == [3, 3, 3]  # flat: the stall shows
    assert {s["host"] for s in samples} == {socket.gethostname()}  # a cluster view counts a host once
    assert samples[0]["notice"].startswith(("NVML absent", "no GPU"))  # said once
    assert all("notice" not in s for s in samples[1:])
    assert all(isinstance(s["values"]["system/cpu_utilization_percentage"], float) for s in samples)
    assert [s["wall_time"] for s in samples] == sorted(s["wall_time"] for s in samples)
    assert [r["record"] for r in records if r["record"] != "status"][-2:] == ["system", "close"]
    assert [r["step"] for r in records if r["record"] == "step" and not r.get("final")] == [1, 2, 3]  # no step added


def test_tensorboard_plots_samples_on_a_time_axis_in_a_run_of_their_own(tmp_path: Path) -> None:
    _stalled_run(tmp_path)
    found = runs(tmp_path / "tb")
    assert sorted(found) == ["system", "train"]
    system, train = found["system"], found["train"]
    assert not any(tag.startswith("system/") for tag in train)
    steps = sorted(system["system/cpu_utilization_percentage"])
    assert len(steps) == 3  # never stacked on one step, though the training step stood still
    assert steps == sorted(set(steps))
    assert all(START <= s < START + 3600 for s in steps)  # seconds of wall time
    assert [system["system/training_step"][s] for s in steps] == [3.0, 3.0, 3.0]
    assert "system/process_memory_rss_megabytes" in system
    (notice,) = system["system/notice"].values()
    assert (notice.decode() if isinstance(notice, bytes) else notice).startswith(("NVML absent", "no GPU"))


def test_csv_writes_samples_to_a_file_of_its_own_when_asked(tmp_path: Path) -> None:
    _stalled_run(tmp_path)
    with (tmp_path / "metrics.system.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["3", "3", "3"]
    assert float(rows[0]["system/process_memory_rss_megabytes"]) > 0
    with (tmp_path / "metrics.csv").open(newline="") as f:
        header = next(csv.reader(f))
    assert header == ["step", "wall_time", "loss"]  # the training's file is untouched


def test_csv_and_tensorboard_write_no_samples_unless_asked(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    bus.attach(CSVSink(tmp_path / "m.csv"))
    bus.attach(TensorBoardSink(tmp_path / "tb"))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run([{"loss": 1.0}])
        pub.sample_system()
    assert not (tmp_path / "m.system.csv").exists()
    assert sorted(runs(tmp_path / "tb")) == ["train"]


def test_the_dashboard_shows_the_machine_and_why_no_gpu(tmp_path: Path) -> None:
    bus, screen = _stalled_run(tmp_path)
    summary = screen.getvalue()
    (line,) = [line for line in summary.splitlines() if "machine:" in line]
    assert "CPU " in line
    assert "memory " in line
    assert "this process" in line
    assert "NVML absent" in line or "no GPU" in line  # this machine has no GPU, and it says so
    (console,) = [s for s in bus.sinks if isinstance(s, ConsoleSink)]
    assert console.snapshot.machine == line.strip()


def test_samples_are_off_with_system_metrics_false(tmp_path: Path) -> None:
    _, screen = _stalled_run_off(tmp_path)
    records = hookbus.read_event_log(tmp_path / "events.jsonl")
    assert all(r["record"] != "system" for r in records)
    assert sorted(runs(tmp_path / "tb")) == ["train"]
    assert not (tmp_path / "metrics.system.csv").exists() or (tmp_path / "metrics.system.csv").read_text() == ""
    assert "machine:" not in screen.getvalue()


def _stalled_run_off(tmp_path: Path) -> tuple[hookbus.EventBus, io.StringIO]:
    screen = io.StringIO()
    bus = hookbus.EventBus(system_metrics=False)
    bus.attach(EventLogSink(tmp_path / "events.jsonl"))
    bus.attach(TensorBoardSink(tmp_path / "tb", every_n_steps=1, system=True))
    bus.attach(CSVSink(tmp_path / "metrics.csv", every_n_steps=1, system=True))
    bus.attach(ConsoleSink(Console(file=screen, width=300), live=False, plain_every_n_secs=0))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run({"loss": 1.0} for _ in range(3))
    return bus, screen


def test_a_replay_carries_the_recorded_samples_and_samples_nothing_itself(tmp_path: Path) -> None:
    _stalled_run(tmp_path)
    bus = hookbus.EventBus()  # sampling on: the replay's run must still sample nothing of its own
    bus.attach(CSVSink(tmp_path / "replayed.csv", every_n_steps=1, system=True))
    bus.attach(EventLogSink(tmp_path / "replayed.jsonl"))
    bus.attach(TensorBoardSink(tmp_path / "replayed-tb", every_n_steps=1, system=True))
    result = hookbus.replay(tmp_path / "events.jsonl", bus)
    assert result.last_step == 3
    strip = [line.split(",", 2)[::2] for line in (tmp_path / "replayed.csv").read_text().splitlines()]
    assert strip == [line.split(",", 2)[::2] for line in (tmp_path / "metrics.csv").read_text().splitlines()]
    # The samples as the live sinks wrote them: the same rows, steps, times and values, no more.
    assert (tmp_path / "replayed.system.csv").read_text() == (tmp_path / "metrics.system.csv").read_text()

    def samples(path: Path) -> list[tuple[Any, ...]]:
        found = [r for r in hookbus.read_event_log(path) if r["record"] == "system"]
        return [(r["step"], r["wall_time"], r.get("notice"), r["values"]) for r in found]

    assert len(samples(tmp_path / "replayed.jsonl")) == 3
    assert samples(tmp_path / "replayed.jsonl") == samples(tmp_path / "events.jsonl")
    assert runs(tmp_path / "replayed-tb")["system"] == runs(tmp_path / "tb")["system"]
