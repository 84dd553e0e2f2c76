"""``hookbus replay LOG --mlflow URI`` (issue 26) against a real ``mlflow server``: a recorded run
uploaded later has the names, steps, values and timestamps the live MLflowSink gave the same
run, and uploading it twice adds nothing (one run, each step once per metric)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _mlflow_server import MlflowServer, free_port, metric_history, require_mlflow

import hookbus
from hookbus.testing import FakeClock, ScriptedPublisher

require_mlflow()

from hookbus.sinks import EventLogSink, MLflowSink  # noqa: E402 - after the skip without MLflow

KEYS = ("loss", "accuracy [top-1]")  # the second is no MLflow name: mapped by the one rule
HPARAMS: dict[str, float | int | str] = {"lr": 0.05, "optimizer": "sgd", "batch": 32}
LAST = 30


def _record_live(directory: Path, server: MlflowServer) -> tuple[Path, str]:
    """A run published with EventLogSink and a live MLflowSink; (the log, the live MLflow run)."""
    clock = FakeClock(start=1_796_000_000.25)  # wall and monotonic clock alike: steps/sec replays equal
    bus = hookbus.EventBus(clock=clock, wall_clock=clock)
    log = directory / "events.jsonl"
    bus.attach(EventLogSink(log, hparams=HPARAMS))
    live = bus.attach(
        MLflowSink(server.uri, experiment="replay-live", hparams=HPARAMS, every_n_steps=1, directory=directory / "live")
    )
    train = ScriptedPublisher(bus, keys=KEYS)
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    with bus:
        train.begin()
        evaluate.begin()
        train.session(0)
        for step in range(1, LAST + 1):
            clock.advance(0.0137 * (1 + step % 3))  # uneven steps: fractional milliseconds
            train.advance({"loss": 1.0 / step, KEYS[1]: step / (step + 1.0)})
            if step % 10 == 0:
                evaluate.evaluate({"loss": 2.0 / step}, step=step)
        train.end()
    assert live.run is not None
    assert live.run.run_id is not None
    return log, live.run.run_id


def _everything(client: Any, run_id: str) -> dict[str, Any]:
    """A run's metrics (every point: step, value, timestamp), params and hookbus's name tag."""
    run = client.get_run(run_id)
    metrics = {key: metric_history(client, run_id, key) for key in run.data.metrics}
    return {"metrics": metrics, "params": run.data.params, "names": run.data.tags.get("hookbus.names")}


def test_a_replayed_run_is_the_live_runs_metrics_and_a_second_replay_adds_nothing(
    tmp_path: Path, mlflow_server: MlflowServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hookbus._cli._cli import main

    monkeypatch.chdir(tmp_path)  # and nothing of the upload is left there (below)

    client = mlflow_server.client()
    log, live_id = _record_live(tmp_path, mlflow_server)
    live = _everything(client, live_id)
    assert set(live["metrics"]) >= {"loss", "eval/loss", "steps/sec"}
    assert [s for s, _, _ in live["metrics"]["loss"]] == list(range(1, LAST + 1))
    argv = ["replay", str(log), "--mlflow", mlflow_server.uri, "--mlflow-experiment", "replayed"]
    for upload in (1, 2):
        assert main(argv) == 0, upload
        assert f"replayed {LAST} step records" in capsys.readouterr().out
        experiment = client.get_experiment_by_name("replayed")
        assert experiment is not None
        runs = client.search_runs([experiment.experiment_id])
        assert len(runs) == 1, (upload, [r.info.run_id for r in runs])  # the second upload found the first's run
        assert runs[0].info.status == "FINISHED"
        replayed = _everything(client, runs[0].info.run_id)
        assert replayed == live, upload  # the same names, steps, values and timestamps; each point once
    assert not (tmp_path / "mlruns").exists()  # the upload's spool and run id lived in a temporary directory


def test_a_replay_to_a_tracker_that_does_not_answer_fails_saying_so_and_leaves_nothing(
    tmp_path: Path, mlflow_server: MlflowServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sink never waits for the network: without this check a replay to a closed port printed
    # "replayed 30 step records" and exited 0 with nothing uploaded.
    from hookbus._cli._cli import main

    log, _ = _record_live(tmp_path, mlflow_server)
    monkeypatch.chdir(tmp_path)
    closed = f"http://127.0.0.1:{free_port()}"
    assert main(["replay", str(log), "--mlflow", closed, "--mlflow-experiment", "nowhere"]) == 1
    err = capsys.readouterr().err
    assert "hookbus replay: the MLflow upload did not complete: " in err, err
    assert "http://127.0.0.1:" in err, err
    assert "unreachable" in err, err
    assert "run it again once MLflow answers" in err, err
    assert not (tmp_path / "mlruns").exists()
