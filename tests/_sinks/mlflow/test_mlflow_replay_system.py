"""``hookbus replay LOG --system`` (issue 48): the machine's samples a log holds reach the replay's
CSV file, TensorBoard run and MLflow run (a real ``mlflow server``) as the live sinks with
``system=True`` wrote them, each once, also when the replay runs twice; without ``--system`` none
(the live sinks' default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _mlflow_server import MlflowServer, metric_history, require_mlflow
from _tb import runs

import hookbus
from hookbus.testing import FakeClock, ScriptedPublisher

require_mlflow()

from hookbus.sinks import CSVSink, EventLogSink, MLflowSink, TensorBoardSink  # noqa: E402 - after the skip

CPU = "system/cpu_utilization_percentage"


def _record_live(directory: Path, server: MlflowServer) -> tuple[Path, str]:
    """A run with samples during a stall, published to EventLogSink and the live sinks with
    ``system=True``; (the log, the live MLflow run)."""
    clock = FakeClock(start=1_796_000_000.25, tick=0.5)  # each reading half a second later
    bus = hookbus.EventBus(clock=clock, wall_clock=clock, system_metrics=3600.0)  # samples only when asked
    log = directory / "events.jsonl"
    bus.attach(EventLogSink(log))
    bus.attach(CSVSink(directory / "live.csv", every_n_steps=1, system=True))
    bus.attach(TensorBoardSink(directory / "live-tb", every_n_steps=1, system=True))
    live = bus.attach(
        MLflowSink(
            server.uri, experiment="live-system", every_n_steps=1, directory=directory / "live-mlflow", system=True
        )
    )
    train = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        train.begin()
        train.session(0)
        for step in range(1, 6):
            train.advance({"loss": 1.0 / step})
            if step % 2 == 0:
                train.sample_system()
        train.sample_system()  # a stall: two samples at step 5
        train.end()
    assert live.run is not None
    assert live.run.run_id is not None
    return log, live.run.run_id


def _system_metrics(client: Any, run_id: str) -> dict[str, list[tuple[int, float, int]]]:
    run = client.get_run(run_id)
    return {key: metric_history(client, run_id, key) for key in run.data.metrics if key.startswith("system/")}


def test_a_replay_with_system_writes_the_samples_as_the_live_sinks_did_each_once(
    tmp_path: Path, mlflow_server: MlflowServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hookbus._cli._cli import main

    monkeypatch.chdir(tmp_path)
    client = mlflow_server.client()
    log, live_id = _record_live(tmp_path, mlflow_server)
    samples = [r for r in hookbus.read_event_log(log) if r["record"] == "system"]
    assert len(samples) == 4  # steps 2, 4, 5, and the run's last as it closed
    live = _system_metrics(client, live_id)
    assert sorted(step for step, _, _ in live[CPU]) == [0, 1, 2, 3]
    argv = ["replay", str(log), "--system", "--mlflow", mlflow_server.uri, "--mlflow-experiment", "replayed-system"]
    for upload in (1, 2):
        out = tmp_path / f"upload-{upload}"
        assert main([*argv, "--csv", str(out / "m.csv"), "--tensorboard", str(out / "tb")]) == 0, upload
        capsys.readouterr()
        experiment = client.get_experiment_by_name("replayed-system")
        assert experiment is not None
        (run,) = client.search_runs([experiment.experiment_id])
        assert _system_metrics(client, run.info.run_id) == live, upload  # names, steps, values, times: once
        assert (out / "m.system.csv").read_text() == (tmp_path / "live.system.csv").read_text()
        replayed, recorded = runs(out / "tb"), runs(tmp_path / "live-tb")
        assert replayed["system"] == recorded["system"]
        assert len(replayed["system"][CPU]) == 4


def test_a_replay_without_system_writes_no_samples(
    tmp_path: Path, mlflow_server: MlflowServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hookbus._cli._cli import main

    monkeypatch.chdir(tmp_path)
    client = mlflow_server.client()
    log, _ = _record_live(tmp_path, mlflow_server)
    argv = ["replay", str(log), "--mlflow", mlflow_server.uri, "--mlflow-experiment", "replayed-without-system"]
    assert main([*argv, "--csv", str(tmp_path / "m.csv"), "--tensorboard", str(tmp_path / "tb")]) == 0
    capsys.readouterr()
    experiment = client.get_experiment_by_name("replayed-without-system")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert _system_metrics(client, run.info.run_id) == {}
    assert "loss" in client.get_run(run.info.run_id).data.metrics
    assert not (tmp_path / "m.system.csv").exists()
    assert sorted(runs(tmp_path / "tb")) == ["train"]
