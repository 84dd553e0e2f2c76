"""A real ``mlflow server`` stopped in the middle of a real ``MonitoredTrainingSession`` run (issue 26):
training goes on to its last step with its checkpoints and CSV rows, ``bus.stats()`` and the
dashboard name the MLflow sink and what it could not ship, and what reached the store before the
stop is there once (read from the server's SQLite store, with the server down). The server's
whole process group is gone after its stop (the test's own fixture, tests/_mlflow_server.py)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from _mlflow_server import MlflowServer, metric_history, require_mlflow

require_mlflow()

from rich.console import Console  # noqa: E402

import hookbus  # noqa: E402 - after the skip without MLflow
from hookbus.sinks import CheckpointSink, ConsoleSink, CSVSink, MLflowSink, StopAtStepSink  # noqa: E402

LAST = 100
CHECKPOINT_EVERY = 20
DOWN_AT = 30


@pytest.mark.tf
def test_a_server_stopped_mid_run_lets_training_finish_and_is_reported(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    from mlflow import MlflowClient

    from hookbus._cli._demo import build_linear_regression

    with MlflowServer(tmp_path / "mlflow") as server, tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=CHECKPOINT_EVERY, every_n_secs=None))
        bus.attach(CSVSink(tmp_path / "metrics.csv", every_n_steps=1))
        tracker = bus.attach(
            MLflowSink(server.uri, experiment="server-down", every_n_steps=1, flush_deadline=10.0, close_deadline=2.0)
        )
        bus.attach(StopAtStepSink(last_step=LAST))
        screen = io.StringIO()
        bus.attach(ConsoleSink(Console(file=screen, width=1000), live=False, plain_every_n_secs=3600))
        assert server.process is not None
        group = server.process.pid  # the server's process group: mlflow, uvicorn and any worker
        bus.on("after_run", lambda e: server.stop() if e.step == DOWN_AT else None, every_n_steps=1)
        saved: list[int] = []
        bus.on("checkpoint_saved", lambda e: saved.append(e.step))
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(tmp_path / "ckpt")) as session:
            while not session.should_stop():
                session.run(model.train_op)
        assert server.process is None  # it went down at step 30 and stayed down
        with pytest.raises(ProcessLookupError):
            os.killpg(group, 0)  # no process of its group is left

    # Training went on: every step, every checkpoint, every CSV row.
    assert bus.step == LAST
    assert saved == list(range(CHECKPOINT_EVERY, LAST + 1, CHECKPOINT_EVERY))
    rows = (tmp_path / "metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == list(range(1, LAST + 1))
    # The failure is visible: the sink is named, disabled, with what it could not ship.
    stats = bus.stats()[tracker.name]
    assert stats.disabled
    assert stats.writer is not None
    assert stats.writer.stalled is not None
    assert stats.writer.stalled.startswith(f"{tracker.name}: "), stats.writer.stalled
    assert server.uri in stats.writer.stalled, stats.writer.stalled
    # And on the dashboard: its closing health line names the sink, disabled, and the server.
    health = [line for line in screen.getvalue().splitlines() if line.startswith("  sinks: ")]
    assert health, screen.getvalue()
    assert tracker.name in health[-1], health
    assert "disabled, stalled: a flush of" in health[-1], health
    assert server.uri in health[-1], health
    # What was shipped before the server went down is in the store once: at least everything the
    # checkpoint at step 20 covered (its barrier flushed it), nothing past the stop.
    store = MlflowClient(tracking_uri=server.store_uri)
    experiment = store.get_experiment_by_name("server-down")
    assert experiment is not None
    (run,) = store.search_runs([experiment.experiment_id])
    assert run.info.status == "RUNNING"  # its end could not reach the server
    shipped = sorted(step for step, _, _ in metric_history(store, run.info.run_id, "loss"))
    assert shipped == list(range(1, len(shipped) + 1))
    assert CHECKPOINT_EVERY <= len(shipped) <= DOWN_AT
