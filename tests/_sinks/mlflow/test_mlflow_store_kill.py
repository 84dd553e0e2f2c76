"""A process SIGKILLed while MLflow makes a new SQLite store (its migrations run at the store's first
use) leaves no half-made store: the next start of the same training opens it and ships its points.

Found by the chief-restart test (tests/reliability/test_chief_restart.py): a chief killed 0.2 s after
its first checkpoint left ``mlflow.db`` with some of MLflow's tables, and every later start failed
with ``table datasets already exists``, its points kept in the spool for good.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

mlflow = pytest.importorskip("mlflow")

from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.subprocess

CHILD = textwrap.dedent(
    """
    import sys
    import hookbus
    from hookbus.sinks import MLflowSink
    from hookbus.testing import ScriptedPublisher

    bus = hookbus.EventBus()
    bus.attach(MLflowSink(directory=sys.argv[1], every_n_steps=1, flush_secs=0.05))
    publisher = ScriptedPublisher(bus, ["loss"])
    with bus:
        publisher.run([{"loss": 1.0 / step} for step in range(1, 6)])
    print("DONE", flush=True)
    """
)


def _run(directory: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def test_a_kill_while_the_store_is_made_leaves_a_store_the_next_start_ships_to(tmp_path: Path) -> None:
    first = _run(tmp_path)
    end = time.monotonic() + 60
    while time.monotonic() < end and not any(
        p.name.startswith(("mlflow.db", ".mlflow.db")) for p in tmp_path.iterdir()
    ):
        time.sleep(0.001)
    time.sleep(0.2)  # inside MLflow's migrations (they take seconds)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    second = _run(tmp_path)
    output, _ = second.communicate(timeout=120)
    assert second.returncode == 0, output
    assert "already exists" not in output, output
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    runs = client.search_runs([experiment.experiment_id])
    # The killed start's training, shipped from its spool by the next start, and the next start's own.
    assert 1 <= len(runs) <= 2
    for run in runs:
        assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [1, 2, 3, 4, 5]
        assert run.info.status == "FINISHED"
    assert not [p.name for p in tmp_path.iterdir() if ".creating-" in p.name]  # the killed start's is gone
