"""MLflowSink and a Keras ``model.evaluate`` outside ``fit`` (issue 47 item 1): the test evaluation is
logged under ``test/<name>`` at the training step, apart from the validation's ``eval/<name>``, and
the run ends FINISHED. ``evaluate`` after ``with bus:`` is a run of its own: ``continue_ended=True``
adds it to the training's MLflow run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _keras_data import classifier, data

pytest.importorskip("mlflow")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from mlflow.tracking import MlflowClient  # noqa: E402

from hookbus import EventBus, EventBusCallback  # noqa: E402
from hookbus.sinks import MLflowSink  # noqa: E402

TRAIN, VAL, TEST = data(64, 0), data(32, 1), data(32, 2)  # 2 steps an epoch in batches of 32


def _runs(directory: Path) -> list[Any]:
    client = MlflowClient(f"sqlite:///{directory / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "hookbus"]
    return list(client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"]))


def _points(directory: Path, run: Any, name: str) -> list[tuple[int, float]]:
    client = MlflowClient(f"sqlite:///{directory / 'mlflow.db'}")
    return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, name))


@pytest.mark.tf
@pytest.mark.parametrize("where", ["inside", "after"])
def test_a_test_evaluation_is_logged_under_test_names_at_the_training_step(mlflow_store: Path, where: str) -> None:
    """fit (validation at steps 2 and 4), then evaluate: ``test/loss`` at step 4 with evaluate's value in
    the training's run, ``eval/loss`` still the validation's two points, the run FINISHED. On 19d8f43
    inside the block nothing was logged; after it, the value went to ``eval/loss``."""
    model = classifier(keras.optimizers.SGD(0.1, name="sgd"))
    bus = EventBus()
    bus.attach(MLflowSink(directory=mlflow_store, every_n_steps=1, flush_secs=0.1, continue_ended=True))
    callback = EventBusCallback(bus, keys=["loss"])
    with bus:
        model.fit(*TRAIN, epochs=2, validation_data=VAL, batch_size=32, verbose=0, callbacks=[callback])
        validation = [model.history.history["val_loss"][i] for i in range(2)]
        if where == "inside":
            result = model.evaluate(*TEST, batch_size=32, verbose=0, callbacks=[callback])
    if where == "after":
        result = model.evaluate(*TEST, batch_size=32, verbose=0, callbacks=[callback])
    bus.close()
    (run,) = _runs(mlflow_store)
    tested, validated = _points(mlflow_store, run, "test/loss"), _points(mlflow_store, run, "eval/loss")
    assert [s for s, _ in tested] == [4]
    assert [v for _, v in tested] == pytest.approx([result], rel=1e-6)
    assert [s for s, _ in validated] == [2, 4]
    assert [v for _, v in validated] == pytest.approx(validation, rel=1e-6)
    assert [s for s, _ in _points(mlflow_store, run, "loss")] == [1, 2, 3, 4]
    assert run.info.status == "FINISHED"
