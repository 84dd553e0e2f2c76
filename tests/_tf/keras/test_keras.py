"""EventBusCallback on real Keras fits: steps, schedules, eval once, epochs, Keras parity, kill + resume."""

from __future__ import annotations

import csv
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from _keras_data import data

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import hookbus  # noqa: E402 - after the importorskip
from hookbus import Event, EventBus, EventBusCallback, UnknownKeyError  # noqa: E402
from hookbus.sinks import CSVSink, EarlyStoppingSink  # noqa: E402


def model(lr: float = 0.05, steps_per_execution: int = 1) -> Any:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    m.compile(
        optimizer=keras.optimizers.Adam(lr),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return m


class BatchLogs(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Keras's own view: logs per batch end, iterations per batch end."""

    def __init__(self) -> None:
        super().__init__()
        self.logs: dict[int, dict[str, float]] = {}

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.logs[int(self.model.optimizer.iterations.numpy())] = dict(logs)


def test_is_a_keras_callback_and_batch_values_are_keras_logs_at_iterations() -> None:
    bus = EventBus()
    got: list[tuple[int, str, dict[str, Any]]] = []
    bus.on("after_run", lambda e: got.append((e.step, e.mode, dict(e.values))), every_n_steps=3)
    callback = EventBusCallback(bus, keys=["loss", "accuracy"])
    assert isinstance(callback, keras.callbacks.Callback)
    assert isinstance(callback, hookbus.EventBusCallback)
    x, y = data()
    m, keras_view = model(), BatchLogs()
    with bus:
        m.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[callback, keras_view])  # 4 batches/epoch
    assert [(s, mode) for s, mode, _ in got] == [(3, "train"), (6, "train")]
    # Keras's batch logs are running means over the epoch: step 6 is the mean of steps 5 and 6.
    for step, _, values in got:
        assert values == keras_view.logs[step]
    assert callback.step == bus.step == 8


def test_steps_per_execution_fires_when_the_step_crosses_a_multiple() -> None:
    bus = EventBus()
    steps: list[int] = []
    bus.on("after_run", lambda e: steps.append(e.step), every_n_steps=4)
    x, y = data(96)
    with bus:
        model(steps_per_execution=3).fit(
            x, y, batch_size=8, epochs=1, verbose=0, callbacks=[EventBusCallback(bus)]
        )  # executions end at 3, 6, 9, 12
    assert steps == [6, 9, 12]


def test_evaluation_is_published_once_per_evaluation(caplog: pytest.LogCaptureFixture) -> None:
    """fit's validations are ``eval/`` once each; a ``model.evaluate`` outside fit is a test evaluation
    (``test/``, issue 47 item 1), published every time, also twice at one step, never as validation."""
    bus = EventBus()
    evals: list[tuple[int, dict[str, Any]]] = []
    tests: list[tuple[int, dict[str, Any]]] = []
    bus.on("after_run", lambda e: evals.append((e.step, dict(e.values))), keys=["eval/loss"])
    bus.on("after_run", lambda e: tests.append((e.step, dict(e.values))), keys=["test/loss"])
    callback = EventBusCallback(bus, keys=["loss", "accuracy"])
    x, y = data()
    m = model()
    with bus:
        history = m.fit(x, y, batch_size=16, epochs=3, verbose=0, validation_data=data(32, 1), callbacks=[callback])
        m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])  # to step 16, no validation
        result = m.evaluate(*data(32, 1), batch_size=16, verbose=0, return_dict=True, callbacks=[callback])
        with caplog.at_level(logging.WARNING, logger="hookbus"):
            m.evaluate(*data(32, 1), batch_size=16, verbose=0, callbacks=[callback])  # step 16 again
    # Three validations inside fit; the two evaluates are test evaluations of step 16, each published.
    assert [s for s, _ in evals] == [4, 8, 12]
    assert [v["eval/loss"] for _, v in evals] == pytest.approx(history.history["val_loss"])
    expected = {"test/loss": pytest.approx(result["loss"]), "test/accuracy": pytest.approx(result["accuracy"])}
    assert tests == [(16, expected), (16, expected)]
    assert not [r for r in caplog.records if "repeats one already published" in r.getMessage()]


def test_epoch_events_reach_only_subscribers_that_ask(tmp_path: Path) -> None:
    bus = EventBus()
    everything: list[str] = []
    epochs: list[tuple[int, dict[str, Any]]] = []
    bus.on("after_run", lambda e: everything.append(e.mode))
    bus.on("after_run", lambda e: epochs.append((e.step, dict(e.values))), keys=["epoch/val_loss"])
    bus.attach(CSVSink(tmp_path / "epochs.csv", epochs=True))
    x, y = data()
    with bus:
        model().fit(
            x,
            y,
            batch_size=16,
            epochs=4,
            verbose=0,
            validation_data=data(32, 1),
            callbacks=[EventBusCallback(bus, keys=["loss", "accuracy"], every_n_epochs=2)],
        )
    assert "epoch" not in everything
    assert [(s, v["epoch"]) for s, v in epochs] == [(8, 1.0), (16, 3.0)]
    assert set(epochs[0][1]) == {"epoch", "epoch/loss", "epoch/accuracy", "epoch/val_loss", "epoch/val_accuracy"}
    lines = (tmp_path / "epochs.csv").read_text().splitlines()
    assert lines[0] == "step,wall_time,epoch,accuracy,loss,val_accuracy,val_loss"
    assert [line.split(",")[:3:2] for line in lines[1:]] == [["8", "1"], ["16", "3"]]


def test_early_stopping_and_epoch_csv_agree_with_keras(tmp_path: Path) -> None:
    x, y = data(128)
    val = data(64, 1)
    fit = {"batch_size": 32, "epochs": 30, "verbose": 0, "validation_data": val}
    theirs = model(lr=0.1).fit(
        x, y, **fit, callbacks=[keras.callbacks.EarlyStopping(monitor="val_loss", patience=2, min_delta=0.002)]
    )
    bus = EventBus()
    stopper = bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=2, min_delta=0.002))
    bus.attach(CSVSink(tmp_path / "epochs.csv", epochs=True))
    logger = keras.callbacks.CSVLogger(str(tmp_path / "keras.csv"))
    with bus:
        ours = model(lr=0.1).fit(x, y, **fit, callbacks=[EventBusCallback(bus, keys=["loss", "accuracy"]), logger])
    stopped_after = len(theirs.history["val_loss"])
    assert stopped_after < 30  # Keras did stop early: the comparison means something
    assert len(ours.history["val_loss"]) == stopped_after
    assert stopper.stopped_at == stopped_after * 4
    assert "eval/loss did not improve" in (bus.stop_reason or "")
    with open(tmp_path / "epochs.csv") as f:
        mine = [{k: v for k, v in row.items() if k not in ("step", "wall_time")} for row in csv.DictReader(f)]
    with open(tmp_path / "keras.csv") as f:
        reference = list(csv.DictReader(f))
    assert [list(r) for r in mine] == [list(r) for r in reference]  # same columns, same order
    assert len(mine) == len(reference) == stopped_after
    for row, ref in zip(mine, reference, strict=True):
        assert {k: float(v) for k, v in row.items()} == pytest.approx({k: float(v) for k, v in ref.items()})


def test_bad_keys_fail_before_any_subscriber_sees_a_step() -> None:
    bus = EventBus()
    bus.on("after_run", print, keys="acuracy")
    m = model()
    x, y = data()
    with pytest.raises(UnknownKeyError, match="'acuracy'"), bus:
        m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[EventBusCallback(bus, keys=["loss", "accuracy"])])
    assert int(m.optimizer.iterations.numpy()) == 0
    bus = EventBus()
    got: list[Event] = []
    bus.on("after_run", got.append)
    with pytest.raises(ValueError, match=r"\['acc'\] are not in Keras's batch logs \['accuracy', 'loss'\]"), bus:
        m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[EventBusCallback(bus, keys=["loss", "acc"])])
    assert got == []
    with pytest.raises(ValueError, match="every_n_epochs"):
        EventBusCallback(EventBus(), every_n_epochs=0)
    with pytest.raises(ValueError, match="restore"):
        EventBusCallback(EventBus(), restore="")
    with pytest.raises(ValueError, match="no CheckpointSink"), EventBus() as bare:
        m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[EventBusCallback(bare, restore=True)])


# -- SIGKILL mid-fit, then resume from the checkpoint -------------------------------------------
CHILD = textwrap.dedent(
    """
    import os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np, keras
    import hookbus
    from hookbus.sinks import CSVSink, CheckpointSink, StopAtStepSink

    directory, last_step = sys.argv[1], int(sys.argv[2])
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    bus = hookbus.EventBus()
    bus.attach(CSVSink(os.path.join(directory, "m.csv"), every_n_steps=1, flush_secs=0.01))
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt"), every_n_steps=15, every_n_secs=None))
    bus.attach(StopAtStepSink(last_step=last_step))
    bus.on("after_run", lambda e: time.sleep(0.01))  # slow enough to be killed mid-fit

    @bus.on("checkpoint_saved")
    def side(event):
        with open(os.path.join(directory, "side.tmp"), "w") as f:
            f.write(str(event.step))
        os.replace(os.path.join(directory, "side.tmp"), os.path.join(directory, "side"))

    callback = hookbus.EventBusCallback(bus, restore=True)
    with bus:
        model.fit(x, y, batch_size=8, epochs=1000, verbose=0, callbacks=[callback])
    print("restored", callback.restored_from, "first", callback.step)
    """
)


@pytest.mark.subprocess
def test_sigkill_mid_fit_then_resume_continues_steps_and_csv_exactly_once(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    last = 150
    target = random.Random(0).randrange(40, 90)
    args = [sys.executable, str(script), str(tmp_path), str(last)]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.PIPE)
    side = tmp_path / "side"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if side.exists() and int(side.read_text()) >= target:
            break
        time.sleep(0.005)
    # Land between two checkpoints: wait until a CSV row past the checkpoint in `side` is on disk.
    # Polled, not a fixed sleep: that row arrives ~40 ms after the checkpoint here, later on a slow
    # or loaded machine (the next checkpoint is 15 steps of >= 10 ms away, so it cannot overtake).
    metrics = tmp_path / "m.csv"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None and side.exists() and metrics.exists():
        if metrics.read_text().count("\n") - 1 > int(side.read_text()):  # complete rows past the header
            break
        time.sleep(0.005)
    if proc.poll() is not None:
        pytest.fail(f"the child ended before it was killed: {proc.communicate()[1].decode()}")
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    restored = int(side.read_text())
    killed_rows = len((tmp_path / "m.csv").read_text().splitlines()) - 1
    assert killed_rows > restored  # the kill landed after rows past the checkpoint: they must go

    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert f"model.ckpt-{restored} " in done.stdout
    with open(tmp_path / "m.csv") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f)]
    assert steps == list(range(1, last + 1))  # every step exactly once, none missing
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")).endswith(f"model.ckpt-{last}")


def test_epoch_csv_has_csvloggers_columns_even_for_metrics_the_keys_do_not_name(tmp_path: Path) -> None:
    """Differential with keras.callbacks.CSVLogger on the same fit: the callback declares only
    'loss', Keras also logs accuracy and the validation metrics; the columns and their order
    (epoch, then sorted) match CSVLogger's, and so do the values."""
    x, y = data()
    bus = EventBus()
    bus.attach(CSVSink(tmp_path / "epochs.csv", epochs=True))
    logger = keras.callbacks.CSVLogger(str(tmp_path / "keras.csv"))
    with bus:
        model().fit(
            x,
            y,
            batch_size=16,
            epochs=3,
            verbose=0,
            validation_data=data(32, 1),
            callbacks=[EventBusCallback(bus, keys=["loss"]), logger],
        )
    with open(tmp_path / "epochs.csv") as f:
        mine = [{k: v for k, v in row.items() if k not in ("step", "wall_time")} for row in csv.DictReader(f)]
    with open(tmp_path / "keras.csv") as f:
        reference = list(csv.DictReader(f))
    assert [list(r) for r in mine] == [list(r) for r in reference]
    assert list(reference[0]) == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    for row, ref in zip(mine, reference, strict=True):
        assert {k: float(v) for k, v in row.items()} == pytest.approx({k: float(v) for k, v in ref.items()})


@pytest.mark.parametrize(
    "validation",
    [{"validation_data": data(32, 1), "validation_freq": 2}, {}],
    ids=["every-second-epoch", "none"],
)
def test_epoch_csv_writes_na_where_csvlogger_does_for_epochs_without_validation(
    tmp_path: Path, validation: dict[str, Any]
) -> None:
    """Differential with keras.callbacks.CSVLogger: epochs without validation values (every
    second epoch validated, or none at all) get CSVLogger's val_* columns with NA cells."""
    x, y = data()
    bus = EventBus()
    bus.attach(CSVSink(tmp_path / "epochs.csv", epochs=True))
    logger = keras.callbacks.CSVLogger(str(tmp_path / "keras.csv"))
    with bus:
        model().fit(
            x,
            y,
            batch_size=16,
            epochs=3,
            verbose=0,
            **validation,
            callbacks=[EventBusCallback(bus, keys=["loss"]), logger],
        )
    with open(tmp_path / "epochs.csv") as f:
        mine = [{k: v for k, v in row.items() if k not in ("step", "wall_time")} for row in csv.DictReader(f)]
    with open(tmp_path / "keras.csv") as f:
        reference = list(csv.DictReader(f))
    assert list(reference[0]) == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [list(r) for r in mine] == [list(r) for r in reference]
    assert "NA" in reference[0].values()
    for row, ref in zip(mine, reference, strict=True):
        assert [k for k, v in row.items() if v == "NA"] == [k for k, v in ref.items() if v == "NA"]
        numbers = {k: float(v) for k, v in row.items() if v != "NA"}
        assert numbers == pytest.approx({k: float(v) for k, v in ref.items() if v != "NA"})
