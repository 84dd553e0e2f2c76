"""The tracker never holds training (issue 39 item 2), a property rather than a time: at
``every_n_steps=1`` on the demo's sub-millisecond linear model under a real
``MonitoredTrainingSession``, the training thread never waits for MLflowSink's writer
(``bus.stats()``'s ``held`` is 0: no row found its queue full), whether the tracker is the local
store, a real ``mlflow server`` over HTTP, or a server that accepts connections and never answers;
every point reaches the spool, and those a server takes are shipped, each step once.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _mlflow_server import MlflowServer, metric_history, require_mlflow

require_mlflow()

import hookbus  # noqa: E402 - after the skip without MLflow
from hookbus.sinks import MLflowSink, StopAtStepSink  # noqa: E402

pytestmark = pytest.mark.tf

STEPS = 3000


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A tracker URI whose server takes every connection and never answers a request."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    closed = threading.Event()

    def accept() -> None:
        while not closed.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)  # read nothing, answer nothing

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        closed.set()
        listener.close()
        for connection in held:
            connection.close()


def _train(tracker: MLflowSink) -> hookbus.EventBus:
    tf = pytest.importorskip("tensorflow")
    from hookbus._cli._demo import build_linear_regression

    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(tracker)
        bus.attach(StopAtStepSink(last_step=STEPS))
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook]) as session:
            while not session.should_stop():
                session.run(model.train_op)
    return bus


def _never_held(bus: hookbus.EventBus, tracker: MLflowSink) -> Any:
    stats = bus.stats()[tracker.name]
    assert not stats.disabled
    assert stats.errors == 0
    writer = stats.writer
    assert writer is not None
    print(f"{tracker.name}: {writer.rows} rows, held {writer.held} ({writer.held_seconds * 1e3:.1f} ms)")
    assert writer.held == 0, writer  # no row waited for room: training never waited for the tracker
    assert writer.rows == writer.written == STEPS  # every step's point reached the spool
    return writer


def test_the_local_store_never_holds_training_at_every_step(mlflow_store: Path) -> None:
    tracker = MLflowSink(directory=mlflow_store, experiment="never-holds", every_n_steps=1)
    _never_held(_train(tracker), tracker)


def test_a_real_server_never_holds_training_at_every_step_and_gets_each_step_once(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    tracker = MLflowSink(mlflow_server.uri, experiment="never-holds-http", directory=tmp_path, every_n_steps=1)
    _never_held(_train(tracker), tracker)
    client = mlflow_server.client()
    experiment = client.get_experiment_by_name("never-holds-http")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert [step for step, _, _ in metric_history(client, run.info.run_id, "loss")] == list(range(1, STEPS + 1))


def test_a_server_that_never_answers_never_holds_training(silent_server: str, tmp_path: Path) -> None:
    tracker = MLflowSink(
        silent_server, experiment="never-holds-silent", directory=tmp_path, every_n_steps=1, close_deadline=2.0
    )
    _never_held(_train(tracker), tracker)
    assert list(tmp_path.glob("*.spool-*.jsonl"))  # the points wait in the spool for a later start
