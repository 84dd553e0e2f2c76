"""A tracker never waits for the network (issue 36 item 2): a real ``mlflow server`` that is not
there yet, or that goes down mid-run, under a real ``MonitoredTrainingSession``.

Before, a server that was not there blocked the first checkpoint for the whole flush deadline,
disabled the sink blaming "a stalled disk", and every point was lost for good. Now points wait in
the sink's spool, training and its checkpoints never wait, ``bus.stats()`` and the dashboard's
health line say the server is unreachable (its URI, the connection error, what waits), and what
the spool holds ships once the server answers: at the next start of the same training.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import pytest
from _mlflow_server import MlflowServer, metric_history, require_mlflow

require_mlflow()

from rich.console import Console  # noqa: E402

import hookbus  # noqa: E402 - after the skip without MLflow
from hookbus.sinks import CheckpointSink, ConsoleSink, CSVSink, MLflowSink, StopAtStepSink  # noqa: E402

pytestmark = pytest.mark.tf

FLUSH_DEADLINE = 10.0


def _reported(bus: hookbus.EventBus, tracker: MLflowSink) -> None:
    """Wait (on the training thread: no step meanwhile) until the sink reports the server unreachable."""
    until = time.monotonic() + 30
    while time.monotonic() < until:
        writer = bus.stats()["MLflowSink"].writer
        if writer is not None and writer.unreachable is not None:
            return
        time.sleep(0.05)


def _train(
    tmp_path: Path, last: int, *, every: int, uri: str | None, hooks: Any = None
) -> tuple[hookbus.EventBus, MLflowSink | None, str, list[int], float]:
    """Train the demo model to ``last`` (resuming from ``tmp_path/ckpt``); (bus, tracker, screen,
    the checkpoints saved, the seconds from the first step to the last)."""
    tf = pytest.importorskip("tensorflow")
    from hookbus._cli._demo import build_linear_regression

    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=every, every_n_secs=None))
        bus.attach(CSVSink(tmp_path / "metrics.csv", every_n_steps=1))
        tracker = None
        if uri is not None:
            tracker = bus.attach(
                MLflowSink(
                    uri,
                    experiment="server-down",
                    directory=tmp_path / "tracker",
                    every_n_steps=1,
                    flush_deadline=FLUSH_DEADLINE,
                    close_deadline=3.0,
                )
            )
        bus.attach(StopAtStepSink(last_step=last))
        screen = io.StringIO()
        bus.attach(ConsoleSink(Console(file=screen, width=1000), live=False, plain_every_n_secs=3600))
        saved: list[int] = []
        bus.on("checkpoint_saved", lambda e: saved.append(e.step))
        times: list[float] = []
        bus.on("after_run", lambda e: times.append(time.monotonic()), every_n_steps=1)
        for step, action in (hooks or {}).items():
            bus.on("after_run", lambda e, step=step, action=action: action(bus, tracker) if e.step == step else None)
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(tmp_path / "ckpt")) as session:
            while not session.should_stop():
                session.run(model.train_op)
    return bus, tracker, screen.getvalue(), saved, (times[-1] - times[0]) if times else 0.0


def _health(screen: str) -> str:
    lines = [line for line in screen.splitlines() if line.startswith("  sinks: ")]
    assert lines, screen
    return lines[-1]


def _the_run(server: MlflowServer) -> Any:
    client = server.client()
    experiment = client.get_experiment_by_name("server-down")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])  # one run
    return run


def test_a_server_absent_for_the_first_45_steps_costs_training_nothing_and_each_step_ships_once(
    tmp_path: Path,
) -> None:
    server = MlflowServer(tmp_path / "mlflow")  # a port nothing listens on yet
    _, _, _, _, bare = _train(tmp_path / "bare", 45, every=15, uri=None)  # the same training without a tracker

    bus, tracker, screen, saved, seconds = _train(tmp_path, 45, every=15, uri=server.uri, hooks={45: _reported})
    assert tracker is not None
    assert bus.step == 45
    assert saved == [15, 30, 45]  # every checkpoint saved: no barrier waited on the network
    stats = bus.stats()[tracker.name]
    assert not stats.disabled
    assert stats.errors == 0
    assert stats.writer is not None
    assert stats.writer.stalled is None  # never a stalled disk
    assert stats.writer.written == 45  # every point in the spool
    assert stats.writer.unreachable is not None
    assert stats.writer.unreachable.startswith(f"{tracker.name}: {server.uri} unreachable (ConnectionError: ")
    assert stats.writer.unreachable.endswith(" points wait in the spool"), stats.writer.unreachable
    health = _health(screen)
    assert f"{tracker.name} {server.uri} unreachable (ConnectionError: " in health, health
    assert "stalled" not in health, health
    assert "disabled" not in health, health
    # No flush waited on the network: the 45 steps took about as long as without a tracker (a
    # generous bound, well under one flush deadline; the measured seconds are printed).
    print(f"45 steps with the server down: {seconds:.2f} s; without a tracker: {bare:.2f} s")
    assert seconds < bare + FLUSH_DEADLINE / 2, (seconds, bare)

    server.start()
    try:
        bus, tracker, screen, saved, _ = _train(tmp_path, 60, every=15, uri=server.uri)
        run = _the_run(server)
        loss = metric_history(server.client(), run.info.run_id, "loss")
    finally:
        server.stop()
    assert saved == [60]  # resumed from 45
    assert [step for step, _, _ in loss] == list(range(1, 61))  # each step once, in one run
    assert run.info.status == "FINISHED"
    assert run.data.tags["hookbus.end"] == "finished"
    assert run.data.tags["hookbus.shipped.train"] == "60"
    assert not list((tmp_path / "tracker").glob("*.spool-*.jsonl"))  # shipped and ended: the spool is gone
    assert bus.stats()[tracker.name].writer.unreachable is None  # type: ignore[union-attr]


def test_a_server_stopped_mid_run_is_reported_as_unreachable_and_its_points_ship_at_the_next_start(
    tmp_path: Path,
) -> None:
    with MlflowServer(tmp_path / "mlflow") as server:

        def _stop_once_shipping(bus: hookbus.EventBus, tracker: MLflowSink) -> None:
            until = time.monotonic() + 30  # the training thread waits until points ship, then the server goes
            while (tracker.run is None or tracker.run.shipped["train"] < 1) and time.monotonic() < until:
                time.sleep(0.01)
            server.stop()

        assert server.process is not None
        group = server.process.pid  # the server's process group: mlflow, uvicorn and any worker
        bus, tracker, screen, saved, _ = _train(
            tmp_path, 100, every=20, uri=server.uri, hooks={30: _stop_once_shipping, 100: _reported}
        )
        assert server.process is None  # it went down at step 30 and stayed down
        with pytest.raises(ProcessLookupError):
            os.killpg(group, 0)  # no process of its group is left

        # Training went on: every step, every checkpoint, every CSV row; the sink stays enabled.
        assert tracker is not None
        assert bus.step == 100
        assert saved == list(range(20, 101, 20))
        rows = (tmp_path / "metrics.csv").read_text().splitlines()[1:]
        assert [int(r.split(",")[0]) for r in rows] == list(range(1, 101))
        stats = bus.stats()[tracker.name]
        assert not stats.disabled
        assert stats.writer is not None
        assert stats.writer.stalled is None
        assert stats.writer.unreachable is not None
        assert f"{server.uri} unreachable (ConnectionError: " in stats.writer.unreachable
        waiting = int(stats.writer.unreachable.rsplit(": ", 1)[1].split()[0])
        assert 1 <= waiting < 100, stats.writer.unreachable  # what shipped before the stop does not wait
        health = _health(screen)
        assert f"{tracker.name} {server.uri} unreachable (ConnectionError: " in health, health
        assert "stalled" not in health, health
        assert "disabled" not in health, health

        # The next start of the same training (same directories), with the server back: the spool ships.
        server.start()
        _train(tmp_path, 110, every=20, uri=server.uri)
        run = _the_run(server)
        loss = metric_history(server.client(), run.info.run_id, "loss")
    assert [step for step, _, _ in loss] == list(range(1, 111))  # each step once, in the one run
    assert run.info.status == "FINISHED"
