"""A tracker run is continued only by the training that made it (issue 36 item 1), with real
processes, SIGKILL and a real ``mlflow server``.

Training A (``run_name="cnn"``, lr 0.05, directory ``a/``) is SIGKILLed at step 43, before its
first checkpoint (at 50). Training B (same server, experiment and ``run_name``, lr 0.001, a fresh
directory ``b/``, nothing restored) gets a run of its own, with only its points and its ``lr``
(before, B "continued" A's RUNNING run: one run holding both trainings' points and A's ``lr``).
Then A restarts in ``a/`` (nothing restored: the kill came before any checkpoint) and continues
its own run, which its id file names: one run for A, each step once, FINISHED.
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

EXPERIMENT = "two-trainings"
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
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        ckpt = os.path.join(directory, "ckpt")
        bus.attach(CheckpointSink(ckpt, every_n_steps=50, every_n_secs=None))
        bus.attach(MLflowSink(uri, experiment="two-trainings", run_name="cnn", hparams={"lr": lr},
                              directory=os.path.join(directory, "mlflow"), every_n_steps=1, flush_secs=0.05))
        bus.attach(StopAtStepSink(last_step=LAST_STEP))

        def die(event):
            if not kill_at or event.step < kill_at:
                return
            until = time.monotonic() + 60  # once its run exists (the id file names it): no step meanwhile
            while time.monotonic() < until:
                found = glob.glob(os.path.join(directory, "mlflow", "mlflow-*.run.json"))
                if found and json.load(open(found[0])).get("run_id"):
                    break
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)

        bus.on("after_run", die)
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=ckpt) as session:
            while not session.should_stop():
                session.run(model.train_op)
"""
).replace("LAST_STEP", str(LAST))


def _train(server: MlflowServer, directory: Path, lr: float, kill_at: int = 0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    argv = [sys.executable, "-c", CHILD, server.uri, str(directory), str(lr), str(kill_at)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)


def _runs(client: Any) -> dict[str, Any]:
    """The experiment's runs by run id."""
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    return {r.info.run_id: r for r in client.search_runs([experiment.experiment_id])}


@pytest.mark.timeout(600)
def test_another_training_gets_its_own_run_and_a_restart_in_its_directory_continues_its_own(
    tmp_path: Path, mlflow_server: MlflowServer
) -> None:
    client = mlflow_server.client()
    killed = _train(mlflow_server, tmp_path / "a", 0.05, kill_at=KILL_AT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (tmp_path / "a" / "ckpt" / "checkpoint").exists()  # killed before its first checkpoint

    other = _train(mlflow_server, tmp_path / "b", 0.001)
    assert other.returncode == 0, other.stderr[-3000:]
    runs = _runs(client)
    assert len(runs) == 2, {i: r.data.params for i, r in runs.items()}  # two runs
    (record_file,) = (tmp_path / "a" / "mlflow").glob("mlflow-*.run.json")
    a_run_id = json.loads(record_file.read_text())["run_id"]  # A's id file, written as its run was created
    a = runs.pop(a_run_id)
    (b,) = runs.values()
    assert a.info.status == "RUNNING"  # killed: its end never came
    # Killed as soon as its run existed: its params may not have shipped yet, and never are B's.
    assert a.data.params in ({}, {"lr": "0.05"}), a.data.params
    assert b.info.status == "FINISHED"
    assert b.data.params == {"lr": "0.001"}
    assert [s for s, _, _ in metric_history(client, b.info.run_id, "loss")] == list(range(1, LAST + 1))
    a_steps = [s for s, _, _ in metric_history(client, a.info.run_id, "loss")]
    assert a_steps == list(range(1, len(a_steps) + 1))  # only A's own points, what shipped before the kill
    assert len(a_steps) <= KILL_AT

    again = _train(mlflow_server, tmp_path / "a", 0.05)
    assert again.returncode == 0, again.stderr[-3000:]
    runs = _runs(client)
    assert sorted(runs) == sorted([a_run_id, b.info.run_id])  # still two: A's restart continued A's run
    a = runs[a_run_id]
    assert a.info.status == "FINISHED"
    assert a.data.params == {"lr": "0.05"}
    assert [s for s, _, _ in metric_history(client, a.info.run_id, "loss")] == list(range(1, LAST + 1))
    assert [s for s, _, _ in metric_history(client, b.info.run_id, "loss")] == list(range(1, LAST + 1))
