"""``MLflowSink(log_model=True)``: the model ExportSink exports, as the run's artifact ``model``.

What a team reads after moving from Keras's ``ModelCheckpoint(save_best_only=True)`` plus an
upload of its file: the run's ``model/model.keras``, opened by ``keras.models.load_model``,
predicts as Keras's best-only file does. Each export replaces the last under that one name, it
ships in the background like the points, and one exported while the server is away ships when
the same training starts again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _file_export import scale_module, scripted
from _keras_data import KERAS_NP_ARRAY, classifier, data
from _mlflow_server import MlflowServer, require_mlflow

import hookbus
from hookbus.sinks import ExportSink, MLflowSink

require_mlflow()

from mlflow.tracking import MlflowClient  # noqa: E402


def _runs(uri: str, experiment: str = "hookbus") -> list[Any]:
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    return list(client.search_runs([found.experiment_id], order_by=["attributes.start_time ASC"]))


def _artifacts(client: MlflowClient, run_id: str, path: str = "model") -> list[str]:
    return sorted(a.path for a in client.list_artifacts(run_id, path))


@KERAS_NP_ARRAY
def test_the_best_export_is_the_runs_model_and_predicts_as_kerass_best_only_file(mlflow_store: Path) -> None:
    keras = pytest.importorskip("keras")
    model = classifier(keras.optimizers.Adam(0.05))
    bus = hookbus.EventBus()
    bus.attach(ExportSink(mlflow_store / "export", monitor="eval/loss"))
    bus.attach(MLflowSink(directory=mlflow_store, log_model=True, flush_secs=0.1))  # artifacts in artifacts/
    theirs = keras.callbacks.ModelCheckpoint(
        str(mlflow_store / "keras" / "e{epoch}.keras"), "val_loss", save_best_only=True
    )
    with bus:
        history = model.fit(
            *data(4 * 32, 0),
            batch_size=32,
            epochs=6,
            shuffle=False,
            verbose=0,
            validation_data=data(64, 1),
            callbacks=[theirs, hookbus.EventBusCallback(bus)],
        )
    best_epoch = int(np.argmin(history.history["val_loss"])) + 1
    assert 1 < best_epoch < 6  # the setting: the best is neither the first nor the last epoch
    (run,) = _runs(f"sqlite:///{mlflow_store / 'mlflow.db'}")
    client = MlflowClient(f"sqlite:///{mlflow_store / 'mlflow.db'}")
    assert _artifacts(client, run.info.run_id) == ["model/model.keras"]  # each export replaced the last
    downloaded = Path(client.download_artifacts(run.info.run_id, "model", str(mlflow_store / "downloaded")))
    held_out = data(50, 7)[0]
    keras.backend.clear_session()
    mine = keras.models.load_model(downloaded / "model.keras").predict(held_out, verbose=0)
    keras.backend.clear_session()
    kerass = keras.models.load_model(mlflow_store / "keras" / f"e{best_epoch}.keras").predict(held_out, verbose=0)
    np.testing.assert_allclose(mine, kerass, rtol=0, atol=0)
    assert not np.allclose(mine, model.predict(held_out, verbose=0))  # the best, not the final model
    assert not list(mlflow_store.glob("*.model-*"))  # shipped: nothing staged is left


def test_an_export_made_while_the_server_is_away_ships_at_the_next_start_of_the_training(tmp_path: Path) -> None:
    server = MlflowServer(tmp_path / "mlflow")  # a port nothing listens on yet

    def train(start: int, steps: int) -> hookbus.EventBus:
        bus = hookbus.EventBus()
        bus.attach(ExportSink(tmp_path / "export"))  # the final model, at the end
        bus.attach(MLflowSink(server.uri, directory=tmp_path / "tracker", log_model=True, close_deadline=2.0))
        publisher, _, _ = scripted(bus)
        with bus:
            publisher.run([{"loss": 1.0}] * steps, start=start)
        return bus

    train(0, 3)
    (staged,) = (tmp_path / "tracker").glob("*.model-3-*")
    assert sorted(p.name for p in staged.iterdir()) == ["model.keras"]  # waits beside the spool
    assert (tmp_path / "export" / "3.keras").read_text() == "3"
    server.start()
    try:
        train(3, 2)  # the next start in the directory (a new run: the first ended), to step 5
        first, second = _runs(server.uri)
        client = server.client()
        texts = {}
        for run in (first, second):
            assert _artifacts(client, run.info.run_id) == ["model/model.keras"]
            path = client.download_artifacts(run.info.run_id, "model/model.keras", str(tmp_path / run.info.run_id))
            texts[run.data.tags["hookbus.final_step"]] = Path(path).read_text()
    finally:
        server.stop()
    assert texts == {"3": "3", "5": "5"}  # the first run's model shipped once the server answered
    assert not list((tmp_path / "tracker").glob("*.model-*"))


def test_log_model_without_an_export_says_what_to_attach(mlflow_store: Path, caplog: pytest.LogCaptureFixture) -> None:
    bus = hookbus.EventBus()
    bus.attach(MLflowSink(directory=mlflow_store, log_model=True))
    publisher, _, _ = scripted(bus)
    with caplog.at_level(logging.WARNING, logger="hookbus"), bus:
        publisher.run([{"loss": 1.0}] * 2)
    assert "log_model=True, but no model was exported in this run: attach hookbus.sinks.ExportSink" in caplog.text
    (run,) = _runs(f"sqlite:///{mlflow_store / 'mlflow.db'}")
    assert _artifacts(MlflowClient(f"sqlite:///{mlflow_store / 'mlflow.db'}"), run.info.run_id) == []


def test_a_loops_saved_model_is_the_runs_model_with_its_serving_signature(mlflow_store: Path) -> None:
    tf = pytest.importorskip("tensorflow")

    module = scale_module()
    uri = f"sqlite:///{mlflow_store / 'mlflow.db'}"
    bus = hookbus.EventBus()
    bus.attach(ExportSink(mlflow_store / "export", monitor="eval/loss"))
    bus.attach(MLflowSink(directory=mlflow_store, log_model=True, flush_secs=0.1))
    loop = hookbus.LoopPublisher(bus, ["loss"], eval_keys=["loss"], serving=module)
    with bus, loop:
        for step, value in enumerate([3.0, 2.0, 1.0, 4.0], start=1):
            module.w.assign(float(step))
            loop.step({"loss": value})
            loop.evaluate({"loss": value})
    (run,) = _runs(uri)
    client = MlflowClient(uri)
    assert "model/saved_model.pb" in _artifacts(client, run.info.run_id)
    downloaded = client.download_artifacts(run.info.run_id, "model", str(mlflow_store / "downloaded"))
    serving = tf.saved_model.load(downloaded).signatures["serving_default"]
    # The best evaluation's model (step 3, w = 3), not the last one trained (w = 4).
    np.testing.assert_allclose(serving(x=tf.constant([1.0, 2.0]))["y"].numpy(), [3.0, 6.0])
