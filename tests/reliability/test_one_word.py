"""How a run ended is one word everywhere (issue 36 item 4): one real training process
per way of ending, and every output that says how it ended read by the tool that reads it.

The dashboard's summary line, the event log's ``close`` record, ``hookbus watch --once`` (its
exit status: 0 finished, 3 stopped, 1 crashed) and the MLflow run's status (FINISHED, KILLED,
FAILED, read with ``MlflowClient``) agree: a stop at the last step and a stop a subscriber decided
are *finished*; SIGTERM and a stop from another thread are *stopped*; an exception is *crashed*.
Before, the dashboard and ``hookbus watch`` said "stopped" (exit 3) for a run that reached
StopAtStepSink's last step while MLflow said FINISHED.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.reliability, pytest.mark.subprocess]

CHILD = Path(__file__).with_name("_ending_child.py")

WAYS = {
    "last_step": ("finished", 0, "FINISHED"),
    "early": ("finished", 0, "FINISHED"),
    "sigterm": ("stopped", 3, "KILLED"),
    "thread": ("stopped", 3, "KILLED"),
    "crash": ("crashed", 1, "FAILED"),
}


@pytest.mark.parametrize("how", list(WAYS))
def test_every_output_says_how_the_run_ended_in_the_same_word(tmp_path: Path, how: str) -> None:
    pytest.importorskip("mlflow", reason="needs MLflow: pip install 'hookbus[mlflow]'")
    from mlflow import MlflowClient

    word, exit_status, tracker_status = WAYS[how]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    trained = subprocess.run(
        [sys.executable, str(CHILD), str(tmp_path), how], capture_output=True, text=True, env=env, timeout=180
    )
    # SIGTERM: a graceful stop, then the process ends as the signal asked, once everything is written.
    status = {"crash": 1, "sigterm": -signal.SIGTERM}.get(how, 0)
    assert trained.returncode == status, trained.stderr[-3000:]
    # The dashboard's summary: "ending: <word> at step 30 after T (N steps/s)".
    (summary,) = [line for line in trained.stdout.splitlines() if line.startswith("ending: ")]
    assert summary.startswith(f"ending: {word} at step 30 after "), summary
    # The event log's close record.
    records = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert records[-1]["record"] == "close"
    assert records[-1]["ended"] == word
    # hookbus watch --once reads the log and exits with the word's status.
    watched = subprocess.run(
        [sys.executable, "-m", "hookbus._cli._cli", "watch", "--once", str(tmp_path / "events.jsonl")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert watched.returncode == exit_status, watched.stdout + watched.stderr
    assert word in watched.stdout
    # The MLflow run's status, read from its store.
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("ending")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == tracker_status
    assert run.data.tags["hookbus.end"] == word
