"""from_keras([MlflowCallback(...)]) beside MLflow's own callback: the same seeded ``fit``, each into
a run the user started on a real ``mlflow server``, read back through ``MlflowClient``: every
metric's history (names, steps, values), the params, the model's summary, the tags' names and the
run's status after ``fit`` (still RUNNING: the user's run is theirs to end)."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
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


@pytest.mark.tf
def test_without_an_active_run_one_is_started_and_left_active(fluent_on: MlflowServer) -> None:
    """As MLflow's callback, whose first ``log_params`` starts a run and leaves it active."""
    client = fluent_on.client()
    mlflow.set_experiment("from-keras-mlflow-no-run")
    converted = _converted(mlflow.keras.MlflowCallback())
    assert mlflow.active_run() is None
    keras.backend.clear_session()
    model = classifier(keras.optimizers.Adam(0.1), ["accuracy"])
    model.fit(*TRAIN, validation_data=VAL, epochs=2, batch_size=32, verbose=0, callbacks=converted)
    run = mlflow.active_run()
    assert run is not None
    try:
        assert client.get_run(run.info.run_id).info.status == "RUNNING"
        assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [0, 1]
    finally:
        mlflow.end_run()


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


CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[4])
    import keras, mlflow, mlflow.keras
    import hookbus
    from hookbus.sinks import MLflowSink
    from _keras_data import classifier, data

    uri, run_id, kill = sys.argv[1], sys.argv[2], sys.argv[3] == "kill"
    mlflow.set_tracking_uri(uri)

    class KillAfterEpoch3(keras.callbacks.Callback):
        # After the bus published epoch 3 and MLflow holds its points, before its checkpoint (which
        # runs once Keras moves on): the resume trains epoch 3 again.
        def on_epoch_end(self, epoch, logs=None):
            if kill and epoch == 3:
                (sink,) = [s for s in converted[0].bus.sinks if isinstance(s, MLflowSink)]
                sink.flush()
                until = time.monotonic() + 60
                while not (sink.run is not None and sink.run.shipped["epoch"] >= 16) and time.monotonic() < until:
                    time.sleep(0.01)
                os.kill(os.getpid(), signal.SIGKILL)

    converted = hookbus.from_keras(
        [keras.callbacks.BackupAndRestore("backup"), mlflow.keras.MlflowCallback()], dashboard=False
    )
    with mlflow.start_run(run_id=run_id):
        model = classifier(keras.optimizers.Adam(0.1), ["accuracy"])
        model.fit(*data(128, 0), validation_data=data(64, 1), epochs=6, batch_size=32, verbose=0,
                  callbacks=[*converted, KillAfterEpoch3()])
    print("DONE", flush=True)
    """
)


@pytest.mark.subprocess
def test_a_killed_fit_resumed_into_the_same_run_logs_each_point_once(fluent_on: MlflowServer, tmp_path: Path) -> None:
    """SIGKILL after epoch 3's points reached MLflow but before its backup; the script run again
    (``mlflow.start_run(run_id=...)``, ``BackupAndRestore``) trains epoch 3 again from epoch 2's
    backup: the run holds every epoch's values and validation once, as an uninterrupted fit."""
    client = fluent_on.client()
    run_id = client.create_run(client.create_experiment("killed")).info.run_id
    tests = str(Path(__file__).resolve().parents[1])

    def script(mode: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", CHILD, fluent_on.uri, run_id, mode, tests]
        return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)

    killed = script("kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    before = _histories(client, run_id)
    assert [s for s, _ in before["loss"]] == [0, 1, 2, 3]  # epoch 3's points shipped before the kill
    resumed = script("resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "DONE" in resumed.stdout
    after = _histories(client, run_id)
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [s for s, _ in after[key]] == list(range(6)), key  # each epoch once
        assert after[key][:4] == before[key], key  # the first values kept
    for key in ("validation_loss", "validation_accuracy"):
        assert len(after[key]) == 6, key  # each validation once, at step 0
        assert after[key][:4] == before[key], key
    assert any(k.startswith("optimizer_") for k in client.get_run(run_id).data.params)
    assert not any(tag.startswith("hookbus.") for tag in client.get_run(run_id).data.tags)
