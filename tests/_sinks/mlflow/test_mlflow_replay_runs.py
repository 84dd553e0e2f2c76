"""``hookbus replay DIR --mlflow URI`` (issue 49 item 4) against a real ``mlflow server``: a sweep
recorded offline ships in one command, one MLflow run per run named after its directory, its
hyper-parameters as params and each point of its log once; a second replay, and a replay run again
after one killed mid-way, add no point and no run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _mlflow_server import MlflowServer, metric_history, require_mlflow
from _sweep_runs import LAST, RUNS, chief_log, points, sweep

from hookbus._cli._cli import main

require_mlflow()

ROOT = Path(__file__).resolve().parents[3]
# Experiments of this module's own: the MLflow server is shared by the tests of one worker, and
# another module's experiment of the same name (a "killed" one) would add its runs to these.
SWEEP, KILLED, WITH_TF1 = "replay-runs-sweep", "replay-runs-killed", "replay-runs-with-tf1"


def uploaded(client: Any, experiment: str) -> dict[str, dict[str, Any]]:
    """Each run of ``experiment`` by name: its status, params and every metric's points."""
    found = client.get_experiment_by_name(experiment)
    assert found is not None, experiment
    runs = client.search_runs([found.experiment_id])
    named = {run.info.run_name: run for run in runs}
    assert len(named) == len(runs), sorted(run.info.run_name for run in runs)  # one MLflow run per run
    return {
        name: {
            "status": run.info.status,
            "params": run.data.params,
            "metrics": {key: metric_history(client, run.info.run_id, key) for key in run.data.metrics},
        }
        for name, run in named.items()
    }


def logged(runs: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Each run's points as its (chief's) log holds them, under MLflowSink's names."""
    found = {}
    for name in RUNS:
        log = chief_log(runs, name)
        train, evaluated = points(log), points(log, "eval")
        found[name] = {**train, **{f"eval/{key.removeprefix('eval/')}": p for key, p in evaluated.items()}}
    return found


def assert_each_point_once(runs: Path, shipped: dict[str, dict[str, Any]]) -> None:
    assert sorted(shipped) == sorted(RUNS)
    for name, want in logged(runs).items():
        run = shipped[name]
        assert run["status"] == "FINISHED", name
        assert run["params"] == {"lr": str(RUNS[name][0]), "optimizer": "sgd", "workers": str(RUNS[name][1])}
        # beside the values, the rates MLflowSink logs (a scripted log records no examples)
        assert set(run["metrics"]) == {*want, "steps/sec", "outside_secs/step"}, name
        for key, points_ in want.items():
            assert [(step, value) for step, value, _ in run["metrics"][key]] == points_, (name, key)
        steps = [step for step, _, _ in run["metrics"]["steps/sec"]]
        assert len(steps) == len(set(steps)), name


def test_a_directory_of_runs_ships_one_mlflow_run_per_run_each_point_once(
    tmp_path: Path, mlflow_server: MlflowServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    client = mlflow_server.client()
    runs = sweep(tmp_path)
    argv = ["replay", str(runs), "--mlflow", mlflow_server.uri, "--mlflow-experiment", SWEEP]
    for upload in (1, 2):
        assert main(argv) == 0, upload
        printed = capsys.readouterr().out
        assert f"replayed {len(RUNS)} runs of {runs}" in printed, printed
        shipped = uploaded(client, SWEEP)
        assert_each_point_once(runs, shipped)
    # Each run as its own log's upload ships it (wall times as timestamps, steps/sec included).
    for name in RUNS:
        alone = [
            *("replay", str(chief_log(runs, name)), "--mlflow", mlflow_server.uri),
            *("--mlflow-experiment", f"replay-runs-{name}"),
        ]
        assert main([*alone, "--mlflow-run-name", name]) == 0
        assert uploaded(client, f"replay-runs-{name}") == {name: shipped[name]}, name
    assert not (tmp_path / "mlruns").exists()  # the uploads' spools lived in a temporary directory


def shipped_half(runs: Path, name: str, tmp_path: Path, uri: str, experiment: str) -> None:
    """``name``'s run as an upload cut at step 15 leaves it: its log's first half (the same first record,
    so the same run) uploaded on its own, as a replay of the run while it was still training ships it."""
    half = tmp_path / "half" / "events.jsonl"
    half.parent.mkdir()
    lines = []
    for line in chief_log(runs, name).read_text().splitlines(keepends=True):
        if '"record":"step"' in line and '"step":16,' in line:
            break
        lines.append(line)
    half.write_text("".join(lines))
    argv = ["replay", str(half), "--mlflow", uri, "--mlflow-experiment", experiment, "--mlflow-run-name", name]
    assert main(argv) == 0


def test_a_replay_killed_after_its_first_run_shipped_then_run_again_ships_each_point_once(
    tmp_path: Path, mlflow_server: MlflowServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    client = mlflow_server.client()
    runs = sweep(tmp_path)
    shipped_half(runs, "lr-0.3", tmp_path, mlflow_server.uri, KILLED)  # a run the tracker holds in part
    argv = ["replay", str(runs), "--mlflow", mlflow_server.uri, "--mlflow-experiment", KILLED]
    spools = tmp_path / "spools"  # the killed process's temporary spools, kept out of the machine's /tmp
    spools.mkdir()
    env = {**os.environ, "TMPDIR": str(spools), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "hookbus", *argv]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        said = []
        for line in child.stdout:  # each run's lines come when it is done: the first run shipped
            said.append(line)
            if line.startswith("cluster: MLflow run "):
                break
        child.kill()  # SIGKILL: no close, no cleanup, the next run's upload cut wherever it was
        _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, (said, err)
    assert said, err
    assert said[-1].startswith("cluster: MLflow run "), (said, err)
    assert not any(line.startswith("replayed ") for line in said)
    before = uploaded(client, KILLED)
    assert before["cluster"]["status"] == "FINISHED"
    assert [step for step, _, _ in before["lr-0.3"]["metrics"]["loss"]] == list(range(1, 16))
    assert main(argv) == 0
    assert f"replayed {len(RUNS)} runs of {runs}" in capsys.readouterr().out
    after = uploaded(client, KILLED)
    cut = {name: (run["status"], len(run["metrics"].get("loss", []))) for name, run in before.items()}
    assert_each_point_once(runs, after)  # lr-0.3 continued, not a second run: each run's name once
    assert after["cluster"] == before["cluster"], cut  # the run shipped before the kill: nothing added


def tf1_training(run: Path) -> None:
    """A real TF1 training (the seed's linear regression, :data:`LAST` steps under
    ``MonitoredTrainingSession``) recorded in ``run / "events.jsonl"``."""
    tf = pytest.importorskip("tensorflow")
    import hookbus
    from hookbus._cli._demo import build_linear_regression
    from hookbus.sinks import EventLogSink, StopAtStepSink

    with tf.Graph().as_default():
        model = build_linear_regression(learning_rate=0.05)
        bus = hookbus.EventBus(handle_signals=False)
        bus.attach(EventLogSink(run / "events.jsonl", hparams={"lr": 0.05, "optimizer": "sgd", "workers": 1}))
        bus.attach(StopAtStepSink(last_step=LAST))
        bus.on("after_run", lambda event: None)  # due at every step: the log records each
        train = hookbus.EventBusHook(bus, {"loss": model.loss, "accuracy": model.accuracy}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[train]) as session:
            while not session.should_stop():
                session.run(model.train_op)


@pytest.mark.tf
def test_a_real_tf1_training_among_the_runs_ships_as_its_log_holds(
    tmp_path: Path, mlflow_server: MlflowServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    client = mlflow_server.client()
    runs = sweep(tmp_path)
    tf1_training(runs / "tf1")
    log = points(runs / "tf1" / "events.jsonl")
    assert [step for step, _ in log["loss"]] == list(range(1, LAST + 1))
    argv = ["replay", str(runs), "--mlflow", mlflow_server.uri, "--mlflow-experiment", WITH_TF1]
    first = None
    for upload in (1, 2):
        assert main(argv) == 0, upload
        assert f"replayed {len(RUNS) + 1} runs of {runs}" in capsys.readouterr().out
        shipped = uploaded(client, WITH_TF1)
        assert sorted(shipped) == sorted([*RUNS, "tf1"])
        tf1 = shipped["tf1"]
        assert tf1["params"] == {"lr": "0.05", "optimizer": "sgd", "workers": "1"}
        assert {"loss", "accuracy", "steps/sec", "outside_secs/step"} <= set(tf1["metrics"])
        assert set(tf1["metrics"]) <= {"loss", "accuracy", "steps/sec", "outside_secs/step", "examples/sec"}
        for key in ("loss", "accuracy"):
            assert [(step, value) for step, value, _ in tf1["metrics"][key]] == log[key], key
        first = first or shipped
        assert shipped == first, upload  # the second replay added nothing anywhere
