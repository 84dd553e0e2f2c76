"""A tracker run is continued only by a training that restores it (issue 36 item 1, issue 45 item 2),
with real processes, SIGKILL and a real ``mlflow server``.

Two scripts run one after the other from one project folder, ``MLflowSink(experiment="day2",
run_name="cnn")`` with the default ``directory`` (``mlruns`` in that folder) in both. Training A
(lr 0.05, outputs in ``a/``) is SIGKILLed at step 43, before its first checkpoint (at 50).
Training B (lr 0.001, outputs in ``b/``, nothing restored) gets a run of its own, with only its
points and its ``lr``; A's run keeps only its own points, shipped by B's start where the kill left
them in the spool, and ends KILLED. (Before issue 36, B continued A's RUNNING run; before issue
45, with the shared default directory it still did: one run with A's params and steps 1-43
twice.) Then training C (outputs in ``c/``) is SIGKILLed at step 55, after its checkpoint at 50,
and started again with the same command: it restores that checkpoint, whose state names its run,
and continues it: one run for C, each step once, FINISHED.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _mlflow_server import MlflowServer, metric_history

pytestmark = [pytest.mark.reliability, pytest.mark.subprocess]

EXPERIMENT = "day2"
LAST = 60
KILL_AT = 43

CHILD = textwrap.dedent(
    """
    import glob, json, os, signal, sys, time
    import tensorflow as tf
    import hookbus
    from hookbus._cli._demo import build_linear_regression
    from hookbus.sinks import CheckpointSink, MLflowSink, StopAtStepSink

    uri, directory, lr, kill_at = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    # The sink's files go to its default directory, ./mlruns of the project folder every script shares.
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        ckpt = os.path.join(directory, "ckpt")
        bus.attach(CheckpointSink(ckpt, every_n_steps=50, every_n_secs=None))
        bus.attach(MLflowSink(uri, experiment="day2", run_name="cnn", hparams={"lr": lr}, every_n_steps=1,
                              flush_secs=0.05))
        bus.attach(StopAtStepSink(last_step=LAST_STEP))

        def run_id():
            found = glob.glob(os.path.join("mlruns", "mlflow-*.run.json"))
            return json.load(open(found[0])).get("run_id") if found else None

        earlier = run_id()  # an earlier script's run

        def die(event):
            if not kill_at or event.step < kill_at:
                return
            until = time.monotonic() + 60  # once its run exists (the id file names it): no step meanwhile
            while time.monotonic() < until and run_id() in (None, earlier):
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)

        bus.on("after_run", die)
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=ckpt) as session:
            while not session.should_stop():
                session.run(model.train_op)
"""
).replace("LAST_STEP", str(LAST))


def _train(
    server: MlflowServer, project: Path, outputs: str, lr: float, kill_at: int = 0
) -> subprocess.CompletedProcess[str]:
    """A training script run from ``project`` with its outputs (checkpoints) in ``project/outputs``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    argv = [sys.executable, "-c", CHILD, server.uri, outputs, str(lr), str(kill_at)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240, cwd=project)


def _runs(client: Any) -> dict[str, Any]:
    """The experiment's runs by run id."""
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    return {r.info.run_id: r for r in client.search_runs([experiment.experiment_id])}


def _steps(client: Any, run: Any) -> list[int]:
    return [s for s, _, _ in metric_history(client, run.info.run_id, "loss")]


@pytest.mark.timeout(900)
def test_scripts_from_one_folder_get_a_run_each_and_only_a_restoring_restart_continues_one(
    tmp_path: Path, mlflow_server: MlflowServer
) -> None:
    client = mlflow_server.client()
    project = tmp_path / "project"
    project.mkdir()
    killed = _train(mlflow_server, project, "a", 0.05, kill_at=KILL_AT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (project / "a" / "ckpt" / "checkpoint").exists()  # killed before its first checkpoint
    (record_file,) = (project / "mlruns").glob("mlflow-*.run.json")  # the default directory, shared
    a_run_id = json.loads(record_file.read_text())["run_id"]  # A's id file, written as its run was created
    assert _runs(client)[a_run_id].info.status == "RUNNING"  # killed: its end never came

    other = _train(mlflow_server, project, "b", 0.001)
    assert other.returncode == 0, other.stderr[-3000:]
    runs = _runs(client)
    assert len(runs) == 2, {i: r.data.params for i, r in runs.items()}  # two runs
    a = runs.pop(a_run_id)
    (b,) = runs.values()
    assert b.info.status == "FINISHED"
    assert b.data.params == {"lr": "0.001"}
    assert _steps(client, b) == list(range(1, LAST + 1))
    # A's run: its own params and points (what its spool held, shipped by B's start), ended KILLED.
    assert (a.info.status, a.data.tags["hookbus.end"]) == ("KILLED", "presumed dead")
    assert a.data.params == {"lr": "0.05"}
    a_steps = _steps(client, a)
    assert a_steps == list(range(1, len(a_steps) + 1))
    assert 0 < len(a_steps) <= KILL_AT

    # C is killed after its first checkpoint; the same command restores it and continues its run.
    killed = _train(mlflow_server, project, "c", 0.02, kill_at=55)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert (project / "c" / "ckpt" / "checkpoint").exists()
    (c_run_id,) = set(_runs(client)) - {a_run_id, b.info.run_id}
    again = _train(mlflow_server, project, "c", 0.02)
    assert again.returncode == 0, again.stderr[-3000:]
    runs = _runs(client)
    assert sorted(runs) == sorted([a_run_id, b.info.run_id, c_run_id])  # the restart continued C's run
    c = runs[c_run_id]
    assert c.info.status == "FINISHED"
    assert c.data.params == {"lr": "0.02"}
    assert _steps(client, c) == list(range(1, LAST + 1))  # each step once
    assert _steps(client, runs[b.info.run_id]) == list(range(1, LAST + 1))
    assert runs[a_run_id].info.status == "KILLED"
