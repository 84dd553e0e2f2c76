"""Issue 48: ``hookbus watch`` shows the machine. A single run: the dashboard's machine line and how
long ago it was sampled. A cluster: one machine row per worker (its task, host, process CPU and
memory, GPUs, the age of its newest sample), and each host's own figures once, however many
workers share it. Logs are written by EventLogSink from real buses (ScriptedPublisher, the bus's
own sampler reading this machine), each worker's under the host name its records carry."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from _watch_pty import PtySession

import hookbus
from hookbus._watch._run import RunLog
from hookbus.sink_api import run_summary_path
from hookbus.sinks import EventLogSink
from hookbus.testing import FakeClock, ScriptedPublisher

HOSTS = ("node-a", "node-a", "node-b")  # two workers share node-a


def _worker(out: Path, index: int, host: str, monkeypatch: pytest.MonkeyPatch, *, stall: float = 0.0) -> Path:
    """Worker ``index``'s log, its samples taken on ``host``: five steps, a sample after each.
    ``stall``: its samples stop after step 2 while training goes on ``stall`` seconds later, and
    the worker is killed after step 5 (its log has no end, no last sample, no close)."""
    import hookbus.sinks.event_log as event_log

    monkeypatch.setattr(event_log, "_HOST", host)  # the name the sink records its host by
    clock = FakeClock(1_800_000_000.0 + index, tick=0.25)
    bus = hookbus.EventBus(clock=clock, wall_clock=clock, system_metrics=3600.0)  # samples when asked
    bus.attach(EventLogSink(out / "events.jsonl", runs_on="each"))
    bus.on("after_run", every_n_steps=1)(lambda event: None)  # every step is due: every step is recorded
    pub = ScriptedPublisher(bus, ["loss"], task=hookbus.Task("worker", index))
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 6):
            if stall and step == 3:
                clock.advance(stall)
            pub.advance({"loss": 1.0 / step})
            if not stall or step <= 2:
                pub.sample_system()
        pub.end()
    log = out / f"events.worker-{index}.jsonl"
    if stall:  # killed after step 5: what followed it never reached the log
        lines = log.read_text().splitlines(keepends=True)
        last = max(i for i, line in enumerate(lines) if '"record":"step"' in line)
        log.write_text("".join(lines[: last + 1]))
    return log


def _cluster(out: Path, monkeypatch: pytest.MonkeyPatch, *, stall: float = 0.0) -> None:
    for index, host in enumerate(HOSTS):
        _worker(out, index, host, monkeypatch, stall=stall if index == 2 else 0.0)


def _once(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str]:
    from hookbus._cli._cli import main

    status = main(["watch", "--once", str(path)])
    return status, capsys.readouterr().out


def test_once_shows_one_machine_row_per_worker_and_each_hosts_figures_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _cluster(tmp_path, monkeypatch)
    status, out = _once(capsys, tmp_path)
    assert status == 0, out
    rows = re.findall(r"^worker (\d) machine: task (\S+) \| host (\S+) \| CPU (\d+)% \| memory ([\d.]+) GB", out, re.M)
    assert [(i, task, host) for i, task, host, _, _ in rows] == [
        ("0", "worker:0", "node-a"),
        ("1", "worker:1", "node-a"),
        ("2", "worker:2", "node-b"),
    ]
    assert all(float(memory) > 0 for *_, memory in rows)  # each process's own resident memory
    assert all(("NVML absent" in line or "no GPU" in line) for line in out.splitlines() if " machine: " in line)
    hosts = re.findall(r"^host (\S+): CPU \d+% · memory [\d.]+ GB \(\d+%\) · disk ", out, re.M)
    assert hosts == ["node-a", "node-b"]  # node-a's two workers: its figures said once


def test_a_worker_whose_samples_stopped_shows_how_old_its_last_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _cluster(tmp_path, monkeypatch, stall=600.0)
    _, out = _once(capsys, tmp_path)
    ages = dict(re.findall(r"^worker (\d) machine: .*\| sampled (\S+) ago$", out, re.M))
    assert set(ages) == {"0", "1", "2"}
    assert re.fullmatch(r"1[0-9]m\d\ds", ages["2"]), ages  # ten minutes behind its newest record, and more
    assert re.fullmatch(r"[\d.]+s", ages["0"]), ages  # its samples went on to its end


def test_a_single_run_shows_its_machine_line_and_when_it_was_sampled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _worker(tmp_path, 0, "node-a", monkeypatch)
    single = tmp_path / "run" / "events.jsonl"
    single.parent.mkdir()
    log.rename(single)
    status, out = _once(capsys, single)
    assert status == 0, out
    (line,) = [line for line in out.splitlines() if "machine:" in line]
    assert "CPU " in line
    assert "this process" in line
    assert re.search(r"^events.jsonl: finished \| .* \| machine sampled [\d.]+s ago$", out, re.M), out


def test_the_watcher_keeps_one_sample_however_many_the_log_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _worker(tmp_path, 0, "node-a", monkeypatch)
    lines = log.read_text().splitlines()
    samples = [line for line in lines if '"record":"system"' in line]
    many = RunLog()
    few = RunLog()
    from hookbus._contract._event_log import parsed

    longer = lines[:-3] + samples * 500 + lines[-3:]
    many.add_all(longer, parsed(longer, 1, "long"))
    few.add_all(lines, parsed(lines, 1, "short"))
    assert len(many.kept) == len(few.kept)  # the newest sample (and the one with the notice), not all of them
    assert many.sample == few.sample


def test_a_cluster_watched_in_a_terminal_shows_a_machine_row_per_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cluster(tmp_path, monkeypatch)
    command = [sys.executable, "-m", "hookbus._cli._cli", "watch", str(tmp_path), "--interval", "0.1"]
    watcher = PtySession(command, cols=160, rows=60)
    try:
        watcher.finish(deadline=60)
        screen = watcher.text
    finally:
        watcher.close()
    assert re.search(r"^host +machine of +task +CPU +memory +GPU +sampled", screen, re.M), screen
    rows = re.findall(r"^(node-\w) +worker (\d) +(worker:\d) +\d+% +[\d.]+ GB ", screen, re.M)
    assert rows == [("node-a", "0", "worker:0"), ("node-a", "1", "worker:1"), ("node-b", "2", "worker:2")], screen
    assert re.findall(r"^host (node-\w): CPU", screen, re.M) == ["node-a", "node-b"], screen


def test_a_sweeps_rows_carry_each_runs_newest_machine_figures_from_its_summaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from hookbus._cli._cli import main

    runs = tmp_path / "runs"
    _cluster(runs / "cluster", monkeypatch)
    _worker(runs / "single", 0, "node-c", monkeypatch)
    for log in (runs / "cluster").glob("*.jsonl"):  # the rows are read from the summaries, not the logs
        assert json.loads(run_summary_path(log).read_text())["machine"]
    assert main(["watch", "--once", "--format", "json", str(runs)]) == 0
    rows = {r["run"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    for name in ("cluster", "single"):
        newest = [
            [r for r in hookbus.read_event_log(log) if r["record"] == "system"][-1]["values"]
            for log in sorted((runs / name).glob("*.jsonl"))
        ]
        machine = rows[name]["machine"]
        assert machine["cpu_percent"] == pytest.approx(
            sum(v["system/process_cpu_utilization_percentage"] for v in newest)
        )
        assert machine["memory_megabytes"] == pytest.approx(
            sum(v["system/process_memory_rss_megabytes"] for v in newest)
        )
        assert machine["gpu_percent"] is None  # no GPU here
    monkeypatch.setenv("COLUMNS", "160")  # the column where it fits
    assert main(["watch", "--once", str(runs)]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^ *run +state +step +steps/s +.*machine", table, re.M), table
    assert re.search(r"^ *cluster ×3 +finished .* CPU \d+% [\d.]+ GB", table, re.M), table


def test_each_workers_gpus_are_in_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Samples as a GPU host's sampler publishes them (its values given: this machine has no GPU),
    through the bus to EventLogSink; the row names each GPU with its utilization and memory."""
    import hookbus.sinks.event_log as event_log

    for index, gpus in enumerate(((88.0, 9800.0), (41.0, 1200.0))):
        monkeypatch.setattr(event_log, "_HOST", "gpu-host")
        bus = hookbus.EventBus(system_metrics=False)
        bus.attach(EventLogSink(tmp_path / "events.jsonl", runs_on="each"))
        pub = ScriptedPublisher(bus, ["loss"], task=hookbus.Task("worker", index))
        values = {
            "system/cpu_utilization_percentage": 50.0,
            "system/system_memory_usage_megabytes": 64000.0,
            "system/process_cpu_utilization_percentage": 120.0,
            "system/process_memory_rss_megabytes": 3000.0,
            "system/gpu_0_utilization_percentage": gpus[0],
            "system/gpu_0_memory_usage_megabytes": gpus[1],
        }
        with bus:
            pub.run([{"loss": 1.0}])
            pub.core.publish_system(1, values)
    status, out = _once(capsys, tmp_path)
    assert status == 0, out
    assert "worker 0 machine: task worker:0 | host gpu-host | CPU 120% | memory 3.0 GB | GPU0 88% 9.8 GB |" in out
    assert "worker 1 machine: task worker:1 | host gpu-host | CPU 120% | memory 3.0 GB | GPU0 41% 1.2 GB |" in out
    assert re.findall(r"^host (\S+): CPU 50% · memory 64.0 GB", out, re.M) == ["gpu-host"]


def test_a_single_run_watched_in_a_terminal_shows_its_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _worker(tmp_path, 0, "node-a", monkeypatch)
    single = tmp_path / "run" / "events.jsonl"
    single.parent.mkdir()
    log.rename(single)
    command = [sys.executable, "-m", "hookbus._cli._cli", "watch", str(single), "--interval", "0.1"]
    watcher = PtySession(command, cols=120, rows=30)
    try:
        watcher.finish(deadline=60)
        screen = watcher.text
    finally:
        watcher.close()
    assert re.search(r"machine: CPU \d+% \(this process \d+%\) · memory", screen), screen
    assert re.search(r"^finished · newest record \S+ ago · machine sampled \S+ ago", screen, re.M), screen
