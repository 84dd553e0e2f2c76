"""Each publisher's model view, as a sink reads it (``context.model()``): offered as the publisher
begins, the same view all through its training, withdrawn as it ends; what each answers, and the
TF1 hook's one rule for a session that is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hookbus
from hookbus import Event, EventBus, EventBusCallback, EventBusHook, LoopPublisher
from hookbus.sink_api import EpochProgress, ModelView, Sink

pytestmark = pytest.mark.tf


class Reads(Sink):
    """Reads the model view at begin, every step and the end; keeps what it answered."""

    def __init__(self) -> None:
        super().__init__(keys=["loss"], every_n_steps=1)
        self.views: list[tuple[str, ModelView]] = []
        self.answers: dict[str, Any] = {}

    def _read(self, when: str) -> None:
        view = self.context.model()
        self.views.append((when, view))
        if when == "after_run" and not self.answers:
            self.answers = {
                "weights": view.weights(),
                "export": view.export(),
                "variables": view.variables(),
                "graph_def": view.graph_def(),
                "config": view.config(),
                "summary": view.summary(),
                "training_params": view.training_params(),
                "direction": view.direction("epoch/val_mae"),
                "ends_epochs": view.ends_epochs(),
                "progress": view.progress(),
            }

    def on_begin(self, event: Event) -> None:
        self._read("begin")

    def on_after_run(self, event: Event) -> None:
        self._read("after_run")

    def on_end(self, event: Event) -> None:
        self._read("end")
        self.at_end = event


def _one_view(reads: Reads, kind: str) -> ModelView:
    """The one view of ``kind`` read all through training; the base view once it ended."""
    views = {id(view) for _, view in reads.views}
    assert len(views) == 1, reads.views
    view = reads.views[0][1]
    assert type(view).__name__ == kind
    assert [when for when, _ in reads.views][:2] == ["begin", "after_run"]
    assert reads.views[-1][0] == "end"
    assert type(reads.context.model()) is ModelView  # withdrawn: every member "not offered"
    return view


def test_the_keras_callback_offers_its_model_and_fits_params() -> None:
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="out")], name="net")
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", metrics=["mae"])
    x, y = np.random.default_rng(0).normal(size=(32, 3)), np.zeros((32, 1))
    bus, reads = EventBus(), Reads()
    bus.attach(reads)
    with bus:
        model.fit(x, y, batch_size=8, epochs=2, callbacks=[EventBusCallback(bus)], verbose=0)
    _one_view(reads, "KerasModelView")
    got = reads.answers
    assert [w.shape for w in got["weights"].snapshot()] == [(3, 1), (1,)]
    assert got["export"].suffix == ".keras"
    assert sorted(got["variables"]) == ["net/out/bias", "net/out/kernel"]  # Keras's weight paths
    assert got["graph_def"] is None
    assert keras.models.model_from_json(got["config"]).count_params() == 4
    assert "Trainable params: 4" in got["summary"]
    assert got["training_params"]["epochs"] == 2
    assert got["training_params"]["steps_per_epoch"] == 4
    assert got["training_params"]["optimizer_name"] == model.optimizer.name  # sgd, numbered after others
    assert got["direction"] == "min"
    assert got["ends_epochs"] is True
    assert got["progress"] == EpochProgress(1, 2, 4, 0)


def test_the_hook_offers_its_graph_and_reads_the_model_only_in_its_session(tf_graph: Any) -> None:
    from hookbus._cli._demo import build_linear_regression

    m = build_linear_regression()
    bus, reads = EventBus(), Reads()
    bus.attach(reads)
    hook = EventBusHook(bus, fetches={"loss": m.loss}, train_op=m.train_op)
    with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
        while not sess.should_stop() and bus.step < 3:
            sess.run(m.train_op)
    view = _one_view(reads, "GraphModelView")
    got = reads.answers
    assert got["weights"] is None
    assert got["export"] is None
    trainable = sorted(v.op.name for v in tf_graph.get_collection("trainable_variables"))
    assert trainable
    assert sorted(got["variables"]) == trainable
    assert all(isinstance(v, np.ndarray) for v in got["variables"].values())
    graph = tf_graph.as_graph_def()
    graph.ParseFromString(got["graph_def"])
    assert "global_step" in {node.name for node in graph.node}
    assert (got["config"], got["summary"], got["training_params"], got["direction"]) == (None, None, None, None)
    assert (got["ends_epochs"], got["progress"]) == (False, None)
    # The session is gone: what reads through it says "not offered"; the graph is still there.
    assert view.variables() is None
    assert view.graph_def()


def test_the_loop_offers_its_weights_and_serving_model(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    w = tf.Variable([1.0, 2.0], name="w")
    bus, reads = EventBus(), Reads()
    bus.attach(reads)
    loop = LoopPublisher(bus, keys=["loss"], weights=[w])
    with bus, loop:
        for _ in range(3):
            w.assign_add([1.0, 1.0])
            loop.step({"loss": 1.0})
    _one_view(reads, "LoopModelView")
    got = reads.answers
    assert got["variables"] == {"w": pytest.approx(np.array([2.0, 3.0]))}  # read at step 1
    snapshot = got["weights"].snapshot()
    w.assign([0.0, 0.0])
    got["weights"].restore(snapshot)
    assert w.numpy().tolist() == [4.0, 5.0]
    assert got["export"] is None  # no serving= given
    assert (got["graph_def"], got["config"], got["summary"], got["training_params"]) == (None, None, None, None)
    assert (got["direction"], got["ends_epochs"], got["progress"]) == (None, False, None)
