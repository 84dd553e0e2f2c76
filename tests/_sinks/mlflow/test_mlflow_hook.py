"""MLflowSink behind the TF1 hook in a real MonitoredTrainingSession: a crash after a checkpoint,
then a restart from it, is one MLflow run with each step once (the re-run steps keep their first
values: MLflow has no API to delete a point)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mlflow")
tf = pytest.importorskip("tensorflow")

from mlflow.tracking import MlflowClient  # noqa: E402 - after the importorskip

import hookbus  # noqa: E402
from hookbus._cli._demo import build_linear_regression  # noqa: E402
from hookbus.sinks import CheckpointSink, MLflowSink, StopAtStepSink  # noqa: E402


def train(directory: Path, last_step: int, crash_at: int | None = None) -> list[tuple[int, float]]:
    """Train the seed model to ``last_step`` (or raise after step ``crash_at``); the losses seen."""
    seen: list[tuple[int, float]] = []
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(CheckpointSink(directory / "ckpt", every_n_steps=10, every_n_secs=None))
        bus.attach(MLflowSink(directory=directory, run_name="tf1", every_n_steps=1, flush_secs=0.1))
        bus.attach(StopAtStepSink(last_step=last_step))
        bus.on("after_run", lambda event: seen.append((event.step, event.values["loss"])), every_n_steps=1)
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op, steps_per_run=1)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(directory / "ckpt")) as sess:
            while not sess.should_stop():
                sess.run(model.train_op)
                if crash_at is not None and bus.step >= crash_at:
                    raise RuntimeError(f"crashed at step {bus.step}")
    return seen


@pytest.mark.tf
def test_a_crashed_session_restarted_from_its_checkpoint_is_one_run_each_step_once(mlflow_store: Path) -> None:
    with pytest.raises(RuntimeError, match="crashed at step 15"):
        train(mlflow_store, last_step=100, crash_at=15)
    client = MlflowClient(f"sqlite:///{mlflow_store / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "hookbus"]
    (failed,) = client.search_runs([experiment.experiment_id])
    assert failed.info.status == "FAILED"
    before = {m.step: m.value for m in client.get_metric_history(failed.info.run_id, "loss")}
    assert sorted(before) == list(range(1, 16))

    resumed = train(mlflow_store, last_step=25)  # restores step 10, re-runs 11..15
    assert resumed[0][0] == 11
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == failed.info.run_id
    assert run.info.status == "FINISHED"
    after = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss"))
    assert [s for s, _ in after] == list(range(1, 26))
    assert dict(after[:15]) == before  # the first values of 11..15 stay
    assert dict(after[15:]) == {s: v for s, v in resumed if s > 15}
    assert run.data.tags["hookbus.shipped.train"] == "25"
