"""MLflowSink behind a real Keras ``fit``: a run that fails after a checkpoint, resumed from it.

The resumed ``fit`` continues the same MLflow run (its id through the checkpoint barrier), RUNNING
again until it finishes; every step, evaluation and epoch is in MLflow once, at the training step,
with the values the CSV file beside it holds.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from _keras_data import classifier, data

pytest.importorskip("mlflow")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from mlflow.tracking import MlflowClient  # noqa: E402

from hookbus import EventBus, EventBusCallback  # noqa: E402
from hookbus.sinks import CheckpointSink, CSVSink, MLflowSink  # noqa: E402

TRAIN, VAL = data(128, 0), data(64, 1)  # 4 steps an epoch in batches of 32
EPOCHS = 4


def store_uri(directory: Path) -> str:
    return f"sqlite:///{directory / 'mlflow.db'}"


class Crash(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Raises after the batch that brings the model to ``at`` (after the checkpoint of epoch 2)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if int(self.model.optimizer.iterations.numpy()) == self.at:
            raise RuntimeError(f"crashed at step {self.at}")


class Status(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Reads the MLflow run's status at each epoch end (after the bus's checkpoint barrier)."""

    def __init__(self, uri: str) -> None:
        super().__init__()
        self.uri = uri
        self.seen: list[str] = []

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        client = MlflowClient(self.uri)
        (experiment,) = [e for e in client.search_experiments() if e.name == "hookbus"]
        self.seen += [r.info.status for r in client.search_runs([experiment.experiment_id])]


def fit(directory: Path, *callbacks: Any) -> EventBus:
    model = classifier(keras.optimizers.SGD(0.1))
    bus = EventBus()
    bus.attach(CheckpointSink(directory / "ckpt", keep=10))
    bus.attach(CSVSink(directory / "metrics.csv", every_n_steps=1))
    bus.attach(MLflowSink(directory=directory, run_name="fit", every_n_steps=1, flush_secs=0.1))
    with bus:
        hook = EventBusCallback(bus, keys=["loss"], restore=True)
        model.fit(
            *TRAIN,
            epochs=EPOCHS,
            validation_data=VAL,
            batch_size=32,
            shuffle=False,
            verbose=0,
            callbacks=[hook, *callbacks],
        )
    return bus


def csv_rows(path: Path) -> dict[int, float]:
    with path.open() as f:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f)}


@pytest.mark.tf
def test_a_failed_fit_resumed_from_its_checkpoint_continues_the_run_each_step_once(mlflow_store: Path) -> None:
    with pytest.raises(RuntimeError, match="crashed at step 10"):
        fit(mlflow_store, Crash(10))
    client = MlflowClient(store_uri(mlflow_store))
    (experiment,) = [e for e in client.search_experiments() if e.name == "hookbus"]
    (failed,) = client.search_runs([experiment.experiment_id])
    assert failed.info.status == "FAILED"
    assert [m.step for m in client.get_metric_history(failed.info.run_id, "loss")] == list(range(1, 11))

    status = Status(store_uri(mlflow_store))
    fit(mlflow_store, status)  # restores the checkpoint of step 8 and re-runs 9 and 10
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == failed.info.run_id
    assert status.seen == ["RUNNING", "RUNNING"]  # epochs 3 and 4 of the resumed fit
    assert run.info.status == "FINISHED"

    def points(name: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, name))

    total = EPOCHS * 4
    loss = points("loss")
    assert [s for s, _ in loss] == list(range(1, total + 1))  # each step once
    assert dict(loss) == csv_rows(mlflow_store / "metrics.csv")  # deterministic training: equal values
    assert [s for s, _ in points("eval/loss")] == [4, 8, 12, 16]  # validation at the step it evaluated
    assert [s for s, _ in points("epoch/loss")] == [4, 8, 12, 16]
    assert points("epoch/val_loss") == []  # each validation value once, as eval/loss (issue 38, item 5)
