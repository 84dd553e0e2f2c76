"""MLflowSink across SIGKILL, SIGTERM and resume (issue 26), against a real ``mlflow server``.

A child trains with CSVSink, CheckpointSink and MLflowSink (and TensorBoard, early stopping,
stop-at-step: ``_train_child.py``) and is, in turn: killed before its first checkpoint, stopped
by SIGTERM, killed at a step after a checkpoint, killed inside a checkpoint's barrier (after the
sinks' states are written, before the model is saved) and killed at a random moment; each time
a new child restarts from the directory, and the last one finishes. Then, read back through
``MlflowClient``: the child killed before any checkpoint has a run of its own (the next child
restores nothing: a new training, so a new run), which the next start ends KILLED, presumed dead,
with its own points; every later child continues one run (each restores the checkpoint naming
it), each step once in every metric's history with the CSV's value, and the status each end gives:
RUNNING after a kill, KILLED after SIGTERM, FINISHED at the end. A resumed run is RUNNING again once the
resumed process's start has shipped; a child killed a few steps after its start may die before its
shipper told the server (training never waits for it), and the server then still says what it last
heard (KILLED) until the next start ships that record.
The children's event log, uploaded afterwards with ``hookbus replay --mlflow``, gives the same
points.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from _mlflow_server import MlflowServer, metric_history

from ._helpers import LONG, csv_column, latest_checkpoint_step, run_child, sigterm_child

pytestmark = [pytest.mark.reliability, pytest.mark.subprocess]

LAST = 120
EXPERIMENT = "kill-and-resume"


def _runs(client: Any) -> list[Any]:
    experiment = client.get_experiment_by_name(EXPERIMENT)
    return [] if experiment is None else list(client.search_runs([experiment.experiment_id]))


@pytest.mark.timeout(1800 if LONG else 300)
def test_each_step_is_in_mlflow_once_with_the_csvs_values_and_the_status_of_each_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_server: MlflowServer
) -> None:
    monkeypatch.chdir(tmp_path)  # the children's MLflowSink keeps its spool and run id in ./mlruns: the same each time
    monkeypatch.setenv("HOOKBUS_TEST_MLFLOW", f"{mlflow_server.uri} {EXPERIMENT}")
    monkeypatch.setenv("HOOKBUS_TEST_EVENT_LOG", "1")  # and the event log, uploaded at the end
    client = mlflow_server.client()
    rng = random.Random(26)
    kills = ["shipped:10", "sigterm", "step:60", "checkpoint:100", f"timer:{rng.randrange(100, 400)}"]
    if LONG:  # more kills at random moments, each restarting from wherever the last one left it
        kills += [f"timer:{rng.randrange(50, 600)}" for _ in range(12)]
    seen: list[dict[str, Any]] = []
    first: str | None = None  # the run of the child killed before any checkpoint
    for gen, kill in enumerate(kills):
        began = time.monotonic()
        if kill == "sigterm":
            result = sigterm_child(tmp_path, gen)
            assert result.returncode == -signal.SIGTERM, result.stderr[-3000:]  # once everything is written
        else:
            result = run_child(tmp_path, LAST, gen, kill)
            if not kill.startswith("timer") or result.returncode != 0:  # a late timer may find the run done
                assert result.returncode == -signal.SIGKILL, (kill, result.stderr[-3000:])
        runs = [r for r in _runs(client) if r.info.run_id != first]
        assert len(runs) == 1, (kill, [(r.info.run_id, r.info.status) for r in runs])  # never another run
        first = first or runs[0].info.run_id
        seen.append(
            {
                "kill": kill,
                "seconds": round(time.monotonic() - began, 1),
                "run_id": runs[0].info.run_id,
                "status": runs[0].info.status,
                "checkpoint": latest_checkpoint_step(tmp_path / "ckpt"),
                "tags": dict(runs[0].data.tags),
            }
        )
    final = run_child(tmp_path, LAST, len(kills))
    assert final.returncode == 0, final.stderr[-3000:]

    killed, run = sorted(_runs(client), key=lambda r: r.info.run_id != first)
    context = [{k: v for k, v in s.items() if k != "tags"} for s in seen]
    assert killed.info.run_id == first, context
    assert {s["run_id"] for s in seen[1:]} == {run.info.run_id}, context  # one MLflow run from the SIGTERM's child on
    assert seen[0]["checkpoint"] is None, context  # killed before any checkpoint
    assert seen[0]["status"] == "RUNNING", context
    # Its run keeps its own points, ended by the next start: no RUNNING orphan.
    assert (killed.info.status, killed.data.tags["hookbus.end"]) == ("KILLED", "presumed dead")
    killed_steps = [step for step, _, _ in metric_history(client, killed.info.run_id, "loss")]
    assert killed_steps == list(range(1, len(killed_steps) + 1)), context
    assert len(killed_steps) >= 10, context
    assert seen[1]["status"] == "KILLED", context  # SIGTERM: a graceful stop by signal
    assert seen[1]["tags"].get("hookbus.stop_reason") == "received SIGTERM", context
    # Resumed after KILLED, then killed: RUNNING once the resume's start shipped (see the docstring).
    assert all(s["status"] in ("RUNNING", "KILLED") for s in seen[2:4]), context
    stopped = seen[1]["checkpoint"]  # SIGTERM's final checkpoint, a few steps after 30 (later on a loaded machine)
    assert seen[2]["checkpoint"] == max(50, stopped), context  # killed at step 60: 50 restores
    assert seen[3]["checkpoint"] == max(75, stopped), context  # killed inside the save at 100: 75 restores
    assert all(s["status"] in ("RUNNING", "KILLED", "FINISHED") for s in seen[4:]), context  # a late timer: done
    assert run.info.status == "FINISHED"

    csv_loss = csv_column(tmp_path / "metrics.csv", "loss")
    csv_accuracy = csv_column(tmp_path / "metrics.csv", "accuracy")
    steps = sorted(csv_loss)
    assert steps == list(range(1, LAST + 1))
    for key, want in (("loss", csv_loss), ("accuracy", csv_accuracy)):
        history = metric_history(client, run.info.run_id, key)
        shipped = [step for step, _, _ in history]
        assert sorted(shipped) == steps, (key, context)  # each step once, none missing
        assert {step: value for step, value, _ in history} == want, (key, context)  # the CSV's values
    # The event log the children kept beside it (each step once), uploaded afterwards by hookbus
    # replay: a run of its own holding the same points.
    from hookbus._cli._cli import main

    log = tmp_path / "events.jsonl"
    assert main(["replay", str(log), "--mlflow", mlflow_server.uri, "--mlflow-experiment", "kill-replayed"]) == 0
    experiment = client.get_experiment_by_name("kill-replayed")
    assert experiment is not None
    (replayed,) = client.search_runs([experiment.experiment_id])
    for key, want in (("loss", csv_loss), ("accuracy", csv_accuracy)):
        history = metric_history(client, replayed.info.run_id, key)
        assert sorted(step for step, _, _ in history) == steps, key
        assert {step: value for step, value, _ in history} == want, key
    print("mlflow kill trials:", context)
