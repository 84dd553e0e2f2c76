"""MLflowSink(run_id=...): logging into a run of the user's, as MLflow's own Keras callback logs into
the active run: the run is neither created nor ended, gets none of hookbus's tags, and still holds
each point once when a killed training's spool ships again."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

mlflow = pytest.importorskip("mlflow")

from mlflow.tracking import MlflowClient  # noqa: E402

import hookbus  # noqa: E402
from hookbus.sinks import MLflowSink  # noqa: E402
from hookbus.testing import FakeClock, ScriptedPublisher  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _client(directory: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{directory / 'mlflow.db'}")


def _users_run(directory: Path) -> str:
    """A run the user made (as ``mlflow.start_run()`` does), with a tag and a param of theirs."""
    client = _client(directory)
    experiment = client.create_experiment("mine")
    run = client.create_run(experiment, run_name="my-run", tags={"team": "vision"})
    client.log_param(run.info.run_id, "batch_size", "32")
    return str(run.info.run_id)


def _loss(directory: Path, run_id: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in _client(directory).get_metric_history(run_id, "loss"))


def test_logs_into_the_users_run_and_leaves_it_running_with_its_own_tags(mlflow_store: Path) -> None:
    run_id = _users_run(mlflow_store)
    before = _client(mlflow_store).get_run(run_id)
    bus = hookbus.EventBus(wall_clock=FakeClock(1_700_000_000.0, 1.0))
    bus.attach(MLflowSink(directory=mlflow_store, run_id=run_id, hparams={"lr": 0.1}, every_n_steps=2))
    with bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": float(step)} for step in range(1, 7)])
    run = _client(mlflow_store).get_run(run_id)
    assert run.info.status == "RUNNING"  # the user's to end
    assert run.info.end_time == before.info.end_time
    assert run.data.tags == before.data.tags  # none of hookbus's (shipped steps, names, end, training)
    assert run.data.params == {"batch_size": "32", "lr": "0.1"}
    assert _loss(mlflow_store, run_id) == [(2, 2.0), (4, 4.0), (6, 6.0)]
    assert sorted(run.data.metrics) == ["loss", "outside_secs/step", "steps/sec"]  # no batch size: no examples
    assert _client(mlflow_store).get_experiment_by_name("hookbus") is None  # no run of its own anywhere


def test_a_function_names_the_run_at_begin(mlflow_store: Path) -> None:
    run_id = _users_run(mlflow_store)
    calls: list[str] = []

    def current() -> str:
        calls.append("called")
        return run_id

    sink = MLflowSink(directory=mlflow_store, run_id=current, every_n_steps=1, layout="keras")
    assert calls == []  # not at construction: the run active when training begins
    bus = hookbus.EventBus()
    bus.attach(sink)
    with bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}] * 3)
    assert calls == ["called"]
    assert _loss(mlflow_store, run_id) == [(1, 1.0), (2, 1.0), (3, 1.0)]
    assert "steps/sec" not in _client(mlflow_store).get_run(run_id).data.metrics  # layout="keras": the logs alone


def test_a_killed_trainings_points_ship_once_when_its_spool_is_read_again(mlflow_store: Path) -> None:
    """SIGKILL after steps 1-15 shipped to the user's run; then the id file is put back to before
    they shipped (a kill between MLflow's answer and the id file's write): the next start reads the
    spool from its start and ships the killed training's points again, and the run, which has no
    hookbus.shipped tags, is the record: each of them is there once, beside the new training's."""
    run_id = _users_run(mlflow_store)
    script = textwrap.dedent(f"""
        import os, signal, time
        import hookbus
        from hookbus.sinks import MLflowSink
        from hookbus.testing import ScriptedPublisher
        bus = hookbus.EventBus()
        sink = bus.attach(MLflowSink(directory={str(mlflow_store)!r}, run_id={run_id!r}, every_n_steps=1,
                                     layout="keras"))
        pub = ScriptedPublisher(bus, ["loss"])
        with bus:
            pub.begin()
            pub.session(0)
            for step in range(1, 31):
                pub.advance({{"loss": float(step)}})
                if step == 15:
                    sink.flush()
                    until = time.monotonic() + 60
                    while not (sink.run is not None and sink.run.shipped["train"] >= 15) and time.monotonic() < until:
                        time.sleep(0.01)
                    os.kill(os.getpid(), signal.SIGKILL)
    """)
    killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _loss(mlflow_store, run_id) == [(s, float(s)) for s in range(1, 16)]
    (record_path,) = mlflow_store.glob("mlflow-*.run.json")
    record: dict[str, Any] = json.loads(record_path.read_text())
    assert record["run_id"] == run_id
    record.update(cursor=None, shipped={}, ended=None)  # as if the kill came before this write
    record_path.write_text(json.dumps(record))

    bus = hookbus.EventBus()
    bus.attach(MLflowSink(directory=mlflow_store, run_id=run_id, every_n_steps=1, layout="keras"))
    with bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": -1.0}] * 5)
    loss = _loss(mlflow_store, run_id)
    assert [v for s, v in loss if v > 0] == [float(s) for s in range(1, 16)]  # once each
    assert [s for s, v in loss if v < 0] == [1, 2, 3, 4, 5]  # the new training's, as a second fit logs them
    run = _client(mlflow_store).get_run(run_id)
    assert run.info.status == "RUNNING"
    assert not any(tag.startswith("hookbus.") for tag in run.data.tags)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"run_id": ""}, r"run_id must be an MLflow run id, a function returning one, or None \(got ''\)"),
        ({"run_id": 7}, r"run_id must be .* \(got 7\)"),
        ({"run_id": "abc", "run_name": "r"}, r"run_name='r' applies to a run the sink creates; with run_id="),
        ({"run_id": "abc", "continue_ended": True}, r"continue_ended=True applies to a run the sink creates"),
        ({"run_id": "abc", "runs_on": "each"}, r"runs_on='each' applies to a run the sink creates"),
        ({"layout": "tensorboard"}, r"layout must be 'hookbus' or 'keras' \(got 'tensorboard'\)"),
    ],
)
def test_bad_arguments_fail_at_construction(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MLflowSink(directory=tmp_path, **kwargs)


def test_a_function_that_names_no_run_fails_before_step_one(mlflow_store: Path) -> None:
    bus = hookbus.EventBus()
    bus.attach(MLflowSink(directory=mlflow_store, run_id=lambda: "", every_n_steps=1))
    with pytest.raises(ValueError, match=r"run_id=<function .*> returned '', not an MLflow run id"), bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}])


def test_layout_keras_logs_epochs_alone_unless_given_a_step_schedule(tmp_path: Path) -> None:
    assert MLflowSink(directory=tmp_path, layout="keras").schedule.is_empty
    assert MLflowSink(directory=tmp_path, layout="keras").logs_epochs
    steps = MLflowSink(directory=tmp_path, layout="keras", every_n_steps=4)
    assert (steps.schedule.every_n_steps, steps.logs_epochs) == (4, False)
    assert MLflowSink(directory=tmp_path).logs_epochs
