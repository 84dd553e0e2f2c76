"""from_keras([MlflowCallback(...)]) beside MLflow's own callback: the same seeded ``fit``, each into
a run the user started on a real ``mlflow server``, read back through ``MlflowClient``: every
metric's history (names, steps, values), the params, the model's summary, the tags' names and the
run's status after ``fit`` (still RUNNING: the user's run is theirs to end)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _keras_data import classifier, data
from _mlflow_server import MlflowServer, require_mlflow

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
require_mlflow()

import mlflow  # noqa: E402 - after the importorskips
import mlflow.keras  # noqa: E402 - it imports Keras

import hookbus  # noqa: E402
from hookbus.sinks import MLflowSink  # noqa: E402

EPOCHS = 3
TRAIN, VAL = data(128, 0), data(64, 1)  # 4 steps an epoch in batches of 32


@pytest.fixture
def fluent_on(mlflow_server: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MlflowServer]:
    """MLflow's fluent API pointed at the server (and back after), in a directory of the test's own."""
    monkeypatch.chdir(tmp_path)  # the converted sink's spool: ./hookbus-mlflow
    mlflow.set_tracking_uri(mlflow_server.uri)
    try:
        yield mlflow_server
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]  # None unsets it (MLflow's own code path)


def _converted(callback: Any, **options: Any) -> list[Any]:
    """``from_keras([callback])``, checked to be the bus's callback alone (MLflow's converted, not passed)."""
    report = io.StringIO()
    converted = hookbus.from_keras([callback], dashboard=False, report=report, **options)
    assert "converted MlflowCallback; passed through nothing" in report.getvalue()
    assert [type(c).__name__ for c in converted] == ["EventBusCallback"]
    return converted


def _fit_in_a_run(callbacks: Any, name: str, client: Any) -> tuple[str, str]:
    """A seeded ``fit`` inside ``mlflow.start_run()``; (the run's id, its status just after ``fit``)."""
    mlflow.set_experiment("from-keras-mlflow")
    with mlflow.start_run(run_name=name) as run:
        keras.backend.clear_session()  # Keras's names start again: the same model and optimizer names in both
        model = classifier(keras.optimizers.Adam(0.1), ["accuracy"])
        model.fit(*TRAIN, validation_data=VAL, epochs=EPOCHS, batch_size=32, verbose=0, callbacks=callbacks)
        mlflow.flush_async_logging()  # MLflow's callback logs asynchronously
        active = mlflow.active_run()
        assert active is not None
        assert active.info.run_id == run.info.run_id  # still the user's active run
        status = client.get_run(run.info.run_id).info.status
    return run.info.run_id, status


def _histories(client: Any, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric's ``(step, value)`` points, in the order they were logged (by timestamp in a step)."""
    found = {}
    for key in client.get_run(run_id).data.metrics:
        points = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        found[key] = [(m.step, m.value) for m in points]
    return found


def _same_run(client: Any, theirs: str, ours: str, tmp_path: Path) -> dict[str, list[tuple[int, float]]]:
    expected, got = _histories(client, theirs), _histories(client, ours)
    assert sorted(got) == sorted(expected)
    for key, points in expected.items():
        assert [s for s, _ in got[key]] == [s for s, _ in points], key
        assert [v for _, v in got[key]] == pytest.approx([v for _, v in points], rel=1e-6), key
    their_run, our_run = client.get_run(theirs), client.get_run(ours)
    assert our_run.data.params == their_run.data.params
    assert any(k.startswith("optimizer_") for k in their_run.data.params)
    assert sorted(our_run.data.tags) == sorted(their_run.data.tags)  # no hookbus.* tag added
    their_summary, our_summary = (
        Path(client.download_artifacts(run, "model_summary.txt", str(tmp_path / run))).read_text()
        for run in (theirs, ours)
    )
    assert our_summary == their_summary
    return expected


@pytest.mark.tf
def test_epoch_logging_is_mlflow_callbacks(fluent_on: MlflowServer, tmp_path: Path) -> None:
    client = fluent_on.client()
    theirs, their_status = _fit_in_a_run([mlflow.keras.MlflowCallback()], "theirs", client)
    converted = _converted(mlflow.keras.MlflowCallback())
    ours, our_status = _fit_in_a_run(converted, "ours", client)
    assert our_status == their_status == "RUNNING"
    metrics = _same_run(client, theirs, ours, tmp_path)
    assert [s for s, _ in metrics["val_loss"]] == list(range(EPOCHS))  # at the epoch's index
    assert [s for s, _ in metrics["validation_loss"]] == [0] * EPOCHS  # its on_test_end's: no step


@pytest.mark.tf
def test_step_logging_is_mlflow_callbacks(fluent_on: MlflowServer, tmp_path: Path) -> None:
    client = fluent_on.client()
    every = {"log_every_epoch": False, "log_every_n_steps": 3}
    theirs, their_status = _fit_in_a_run([mlflow.keras.MlflowCallback(**every)], "theirs", client)
    converted = _converted(mlflow.keras.MlflowCallback(**every), keys=["loss", "accuracy"])
    ours, our_status = _fit_in_a_run(converted, "ours", client)
    assert our_status == their_status == "RUNNING"
    metrics = _same_run(client, theirs, ours, tmp_path)
    assert [s for s, _ in metrics["loss"]] == [3, 6, 9, 12]  # optimizer.iterations, every 3
    assert "val_loss" not in metrics


def test_model_id_and_a_bad_step_count_are_refused_before_training() -> None:
    with pytest.raises(ValueError, match=r"MlflowCallback\(model_id='m-1'\)"):
        hookbus.from_keras([mlflow.keras.MlflowCallback(model_id="m-1")])
    callback = mlflow.keras.MlflowCallback(log_every_epoch=False, log_every_n_steps=1)
    callback.log_every_n_steps = 0
    with pytest.raises(ValueError, match=r"MlflowCallback\(log_every_n_steps=0\) must be a positive int"):
        hookbus.from_keras([callback])


def test_the_sink_is_built_from_the_callbacks_arguments(fluent_on: MlflowServer) -> None:
    (callback,) = hookbus.from_keras(
        [mlflow.keras.MlflowCallback(log_every_epoch=False, log_every_n_steps=5)], dashboard=False, report=io.StringIO()
    )
    (sink,) = [s for s in callback.bus.sinks if isinstance(s, MLflowSink)]
    assert (sink.layout, sink.schedule.every_n_steps, sink.logs_epochs) == ("keras", 5, False)
    assert sink.tracking_uri == fluent_on.uri
    assert callable(sink.run_id)
