"""MLflowSink logs the machine's samples (the bus's ``system`` signal) as MLflow's own system
metrics, on a real ``mlflow server`` read back through its REST API (issue 48).

MLflow's System metrics tab shows the run's metrics named ``system/...``; its own monitor
(``mlflow.system_metrics.SystemMetricsMonitor``) logs sample n at step n (0, 1, 2, ..., going on
from the run's last step when it resumes) with the sample's wall time. The sink logs each sample
so, once across a kill and a resume. The samples come from a thread of their own, as the
sampler's do (``on_system`` is never called on the training thread).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from _mlflow_server import MlflowServer, require_mlflow

require_mlflow()

import hookbus  # noqa: E402 - after the skip without MLflow
from hookbus.sink_api import Event  # noqa: E402
from hookbus.sinks import MLflowSink  # noqa: E402
from hookbus.testing import ScriptedPublisher  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
CPU = "system/cpu_utilization_percentage"
MEMORY = "system/system_memory_usage_megabytes"
T0 = 1_700_000_000.0


def sample(n: int, step: int) -> Event:
    """Sample ``n`` of the machine (its values say which), taken at training step ``step``."""
    values = {CPU: 10.0 + n, MEMORY: 1000.0 + n, "system/hookbus_unknown": "no GPU"}
    return Event("system", step, mode="system", values=values, wall_time=T0 + 10.0 * n)


def from_thread(sink: MLflowSink, events: list[Event]) -> None:
    """Hand ``events`` to the sink from another thread, as the sampler does, and wait for it."""

    def sampler() -> None:
        for event in events:
            sink.on_system(event)

    thread = threading.Thread(target=sampler, name="sampler")
    thread.start()
    thread.join()


def history(server: MlflowServer, run_id: str, name: str) -> list[tuple[int, float, int]]:
    return sorted((m.step, m.value, m.timestamp) for m in server.client().get_metric_history(run_id, name))


def the_run(server: MlflowServer) -> Any:
    client = server.client()
    experiment = client.get_experiment_by_name("system")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    return run


def test_samples_are_mlflows_system_metrics_numbered_as_its_monitor_numbers_them(tmp_path: Path) -> None:
    with MlflowServer(tmp_path / "server") as server:
        bus = hookbus.EventBus(system_metrics=False)  # the samples are the test's own
        sink = bus.attach(
            MLflowSink(
                server.uri, experiment="system", directory=tmp_path / "d", every_n_steps=1, flush_secs=0.1, system=True
            )
        )
        pub = ScriptedPublisher(bus, ["loss"])
        with bus:
            pub.begin()
            from_thread(sink, [sample(99, 0)])  # before the run opens: not logged
            pub.session(0)
            for step in range(1, 6):
                pub.advance({"loss": float(step)})
                from_thread(sink, [sample(step - 1, step)])
            pub.end()
        run = the_run(server)
        assert run.info.status == "FINISHED"
        cpu = history(server, run.info.run_id, CPU)
        # Step n for sample n (not the training step it was taken at), its own wall time.
        assert cpu == [(n, 10.0 + n, int((T0 + 10.0 * n) * 1000)) for n in range(5)]
        assert [(s, v) for s, v, _ in history(server, run.info.run_id, MEMORY)] == [(n, 1000.0 + n) for n in range(5)]
        assert history(server, run.info.run_id, "system/hookbus_unknown") == []  # text is no metric
        assert [s for s, _, _ in history(server, run.info.run_id, "loss")] == [1, 2, 3, 4, 5]
        assert run.data.tags["hookbus.final_step"] == "5"  # the samples' numbers are no training step


@pytest.mark.parametrize("shipped", [True, False], ids=["shipped-before-the-kill", "spooled-at-the-kill"])
def test_a_kill_and_a_resume_log_each_sample_once(tmp_path: Path, shipped: bool) -> None:
    """Samples 0-2 before the checkpoint, 3-5 after it, then SIGKILL (with 3-5 shipped, or only in
    the spool); the resume from the checkpoint logs 6-8: every sample once, numbered 0-8."""
    state_file = tmp_path / "state.json"
    wait = "sink.run.shipped['system'] >= 5" if shipped else "True"
    with MlflowServer(tmp_path / "server") as server:
        script = textwrap.dedent(f"""
            import json, os, signal, sys, threading, time
            sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(ROOT / "tests")!r}]
            import hookbus
            from hookbus.sinks import MLflowSink
            from hookbus.testing import ScriptedPublisher
            from test_mlflow_system import from_thread, sample
            bus = hookbus.EventBus(system_metrics=False)  # the samples are the test's own
            sink = bus.attach(MLflowSink({server.uri!r}, experiment="system", directory={str(tmp_path / "d")!r},
                                         every_n_steps=1, flush_secs=0.1, system=True))
            pub = ScriptedPublisher(bus, ["loss"])
            with bus:
                pub.begin()
                pub.session(0)
                for step in range(1, 4):
                    pub.advance({{"loss": float(step)}})
                    from_thread(sink, [sample(step - 1, step)])
                sink.flush()
                until = time.monotonic() + 60
                while sink.run.shipped["system"] < 2 and time.monotonic() < until:
                    time.sleep(0.01)
                with open({str(state_file)!r}, "w") as f:
                    json.dump(sink.state_dict(), f)  # the checkpoint at step 3
                for step in range(4, 7):
                    pub.advance({{"loss": float(step)}})
                    from_thread(sink, [sample(step - 1, step)])
                sink.flush()
                until = time.monotonic() + 60
                while not ({wait}) and time.monotonic() < until:
                    time.sleep(0.01)
                os.kill(os.getpid(), signal.SIGKILL)
        """)
        killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        state = json.loads(state_file.read_text())
        assert state["shipped"]["system"] == 2

        bus = hookbus.EventBus(system_metrics=False)  # the samples are the test's own
        sink = bus.attach(
            MLflowSink(
                server.uri, experiment="system", directory=tmp_path / "d", every_n_steps=1, flush_secs=0.1, system=True
            )
        )
        pub = ScriptedPublisher(bus, ["loss"])
        with bus:
            pub.begin()
            sink.load_state_dict(state)  # as the checkpoint sink loads it, before the session
            pub.session(3, restored=True)
            for step in range(4, 7):
                pub.advance({"loss": float(step)})
                from_thread(sink, [sample(step + 2, step)])
            pub.end()
        run = the_run(server)  # continued: one run
        assert run.info.status == "FINISHED"
        cpu = history(server, run.info.run_id, CPU)
        assert [(s, v) for s, v, _ in cpu] == [(n, 10.0 + n) for n in range(9)]
        assert [t for _, _, t in cpu] == [int((T0 + 10.0 * n) * 1000) for n in range(9)]


def test_the_bus_samplers_readings_reach_mlflows_system_metrics(tmp_path: Path) -> None:
    """End to end: the bus's own sampler (its period long, so the samples are the two taken here
    and the last one the close takes) reads this machine, and MLflow's REST API returns the samples
    under MLflow's names at steps 0, 1, 2, with values /proc would give (a CPU share, a memory
    size), the GPU-less notice not logged as a metric."""
    with MlflowServer(tmp_path / "server") as server:
        bus = hookbus.EventBus(system_metrics=3600.0)
        bus.attach(
            MLflowSink(
                server.uri, experiment="system", directory=tmp_path / "d", every_n_steps=1, flush_secs=0.1, system=True
            )
        )
        pub = ScriptedPublisher(bus, ["loss"])
        with bus:
            pub.begin()
            pub.session(0)
            for step in range(1, 4):
                pub.advance({"loss": float(step)})
                if step != 2:
                    pub.sample_system()
            pub.end()
        run = the_run(server)
        cpu = history(server, run.info.run_id, "system/cpu_utilization_percentage")
        memory = history(server, run.info.run_id, "system/system_memory_usage_megabytes")
        assert [s for s, _, _ in cpu][:2] == [0, 1]
        assert [s for s, _, _ in memory] == [s for s, _, _ in cpu]
        assert all(0.0 <= v <= 100.0 for _, v, _ in cpu)
        total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e6
        assert all(0.0 < v < total_mb for _, v, _ in memory)
        assert history(server, run.info.run_id, "system/notice") == []
