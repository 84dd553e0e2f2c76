"""MLflowSink beside MLflow's own Keras callback (``mlflow.keras.MlflowCallback``) on the same ``fit``,
both read back from a real ``mlflow server`` through ``MlflowClient.get_metric_history``.

What MLflow's callback does (measured here, MLflow 3.17): with its default ``log_every_epoch=True``
it logs Keras's epoch logs (``loss``, ``accuracy``, ``val_loss``, ``val_accuracy``) at
``step=epoch``, the 0-based epoch index, not a training step; and from ``on_test_end`` it logs the
same validation values again as ``validation_loss`` / ``validation_accuracy`` with no step, so
every epoch's point lands at step 0. With ``log_every_n_steps=n`` it logs the batch logs (Keras's
running means) at ``step=optimizer.iterations``. MLflowSink logs the same values: batch values at
their training step, the evaluations as ``eval/<key>`` at the training step evaluated, the epoch
logs as ``epoch/<key>`` at the step the epoch ended, each with its event's own wall time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _keras_data import classifier, data
from _mlflow_server import MlflowServer, metric_history, require_mlflow

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
require_mlflow()

import mlflow  # noqa: E402 - after the importorskips
import mlflow.keras  # noqa: E402 - it imports Keras

import hookbus  # noqa: E402
from hookbus.sinks import EventLogSink, MLflowSink  # noqa: E402

EPOCHS = 3
STEPS_PER_EPOCH = 4  # 128 examples in batches of 32
TRAIN, VAL = data(128, 0), data(64, 1)


def _model() -> Any:
    return classifier(keras.optimizers.Adam(0.1), ["accuracy"])


@pytest.fixture
def fluent_on(mlflow_server: MlflowServer) -> Iterator[MlflowServer]:
    """MLflow's fluent API (which its callback logs through) pointed at the server, and back after."""
    mlflow.set_tracking_uri(mlflow_server.uri)
    try:
        yield mlflow_server
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]  # None unsets it (MLflow's own code path)


def _fit_beside(server: MlflowServer, tmp_path: Path, name: str, theirs: Any) -> tuple[str, str, list[dict[str, Any]]]:
    """One ``fit`` with MLflow's ``theirs`` callback and hookbus's MLflowSink; (their run, our run, our event log)."""
    bus = hookbus.EventBus()
    sink = bus.attach(
        MLflowSink(
            server.uri,
            experiment="hookbus-beside-mlflow",
            run_name=name,
            every_n_steps=1,
            directory=tmp_path / f"{name}-mlflow",
        )
    )
    bus.attach(EventLogSink(tmp_path / f"{name}.jsonl"))  # the events' own wall times, to compare
    ours = hookbus.EventBusCallback(bus, keys=("loss", "accuracy"))
    mlflow.set_experiment("mlflow-keras-callback")
    with mlflow.start_run(run_name=name) as run, bus:
        _model().fit(*TRAIN, validation_data=VAL, epochs=EPOCHS, batch_size=32, verbose=0, callbacks=[theirs, ours])
    mlflow.flush_async_logging()  # the callback logs asynchronously
    assert sink.run is not None
    assert sink.run.run_id is not None
    return run.info.run_id, sink.run.run_id, hookbus.read_event_log(tmp_path / f"{name}.jsonl")


def _by_step(client: Any, run_id: str, key: str) -> dict[int, float]:
    history = metric_history(client, run_id, key)
    steps = [step for step, _, _ in history]
    assert len(steps) == len(set(steps)), (key, history)  # one point per step
    return {step: value for step, value, _ in history}


def _values(client: Any, run_id: str, key: str) -> list[float]:
    return [value for _, value, _ in metric_history(client, run_id, key)]


@pytest.mark.tf
def test_epoch_and_validation_metrics_are_mlflow_callbacks_values_at_training_steps(
    fluent_on: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = fluent_on.client()
    theirs, ours, log = _fit_beside(fluent_on, tmp_path, "epochs", mlflow.keras.MlflowCallback())
    epoch_ends = [STEPS_PER_EPOCH * (e + 1) for e in range(EPOCHS)]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        at_epoch = _by_step(client, theirs, key)
        assert sorted(at_epoch) == list(range(EPOCHS))  # MLflow's: the epoch index as the step
        # Ours: the epoch's values at the step it ended; the validation's once, under eval/ (below).
        expected = {epoch_ends[e]: v for e, v in at_epoch.items()} if not key.startswith("val_") else {}
        assert _by_step(client, ours, f"epoch/{key}") == expected
    for key in ("loss", "accuracy"):
        # MLflow's own validation points: every epoch's at step 0, one after the other.
        validation = metric_history(client, theirs, f"validation_{key}")
        assert [step for step, _, _ in validation] == [0] * EPOCHS
        # Ours: each evaluation at the training step it evaluated, the same values.
        evaluated = _by_step(client, ours, f"eval/{key}")
        assert evaluated == dict(zip(epoch_ends, [v for _, v, _ in validation], strict=True))
        assert evaluated == {epoch_ends[e]: v for e, v in _by_step(client, theirs, f"val_{key}").items()}
    # Timestamps are the events' own wall times (the event log on the same bus records them).
    recorded = {r["step"]: r["wall_time"] for r in log if r["record"] == "step" and r["mode"] == "eval"}
    assert {s: t for s, _, t in metric_history(client, ours, "eval/loss")} == {
        s: int(t * 1000) for s, t in recorded.items()
    }
    # That log uploaded afterwards (hookbus replay --mlflow) is the live run again, epochs included.
    from hookbus._cli._cli import main

    monkeypatch.chdir(tmp_path)  # the replay's MLflowSink keeps its files in ./mlruns

    argv = ["replay", str(tmp_path / "epochs.jsonl"), "--mlflow", fluent_on.uri, "--mlflow-experiment", "fit-replayed"]
    assert main(argv) == 0
    experiment = client.get_experiment_by_name("fit-replayed")
    assert experiment is not None
    (replayed,) = client.search_runs([experiment.experiment_id])
    live = client.get_run(ours).data.metrics
    assert set(replayed.data.metrics) == set(live)
    assert {"steps/sec", "examples/sec", "outside_secs/step"} <= set(live)  # under fit, examples are counted
    # Live, the rates count monotonic seconds; replayed, wall seconds. The time outside per step is as recorded.
    for key in set(live) - {"steps/sec", "examples/sec"}:
        assert metric_history(client, replayed.info.run_id, key) == metric_history(client, ours, key), key


@pytest.mark.tf
def test_batch_metrics_are_mlflow_callbacks_values_at_the_same_steps(fluent_on: MlflowServer, tmp_path: Path) -> None:
    client = fluent_on.client()
    callback = mlflow.keras.MlflowCallback(log_every_epoch=False, log_every_n_steps=1)
    theirs, ours, log = _fit_beside(fluent_on, tmp_path, "batches", callback)
    # Its params: the optimizer's configuration (optimizer_<name>); ours the same values, and fit's.
    their_params, our_params = client.get_run(theirs).data.params, client.get_run(ours).data.params
    optimizer = {k: v for k, v in their_params.items() if k.startswith("optimizer_")}
    assert "optimizer_learning_rate" in optimizer
    assert {k: our_params.get(k) for k in optimizer} == optimizer
    assert (our_params["epochs"], our_params["steps_per_epoch"]) == (str(EPOCHS), str(STEPS_PER_EPOCH))
    # Its artifact: the model's summary, the same text (one fit, one model).
    their_summary, our_summary = (
        Path(client.download_artifacts(run, "model_summary.txt", str(tmp_path / run))).read_text()
        for run in (theirs, ours)
    )
    assert "Total params" in their_summary
    assert our_summary == their_summary
    steps = list(range(1, EPOCHS * STEPS_PER_EPOCH + 1))
    for key in ("loss", "accuracy"):
        at_step = _by_step(client, theirs, key)
        assert sorted(at_step) == steps  # MLflow's: optimizer.iterations, as hookbus's step
        assert _by_step(client, ours, key) == at_step  # Keras's running means, the same values
    recorded = {
        r["step"]: r["wall_time"] for r in log if r["record"] == "step" and r["mode"] == "train" and not r.get("final")
    }
    assert {s: t for s, _, t in metric_history(client, ours, "loss")} == {s: int(t * 1000) for s, t in recorded.items()}
    # Still MLflow's validation at step 0, every epoch.
    assert [step for step, _, _ in metric_history(client, theirs, "validation_loss")] == [0] * EPOCHS
