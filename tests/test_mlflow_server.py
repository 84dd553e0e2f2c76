"""The test's own ``mlflow server`` (tests/_mlflow_server.py): it serves MLflow's client, keeps its
store across a stop and a start on the same port, and leaves no process of its group behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _mlflow_server import MlflowServer, metric_history, require_mlflow

require_mlflow()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_server_serves_the_client_survives_a_restart_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a refused call fails at once
    server = MlflowServer(tmp_path / "mlflow")
    with server:
        assert server.process is not None
        pgid = server.process.pid
        client = server.client()
        run = client.create_run(client.create_experiment("fixture"))
        client.log_metric(run.info.run_id, "loss", 0.5, timestamp=1_000, step=3)
        server.stop()
        assert not _group_alive(pgid)  # uvicorn and every other child of the group are gone
        down = server.client()
        with pytest.raises(Exception, match="Connection refused|Max retries"):
            down.get_run(run.info.run_id)
        server.start()
        assert metric_history(server.client(), run.info.run_id, "loss") == [(3, 0.5, 1_000)]
        assert server.process is not None
        pgid = server.process.pid
    assert not _group_alive(pgid)
