"""A latest checkpoint that cannot be restored (its data file cut short): the resume names it and
what is wrong, and falls back to the previous checkpoint ``keep`` holds, with the sinks' states
saved beside that one, as Keras's ``BackupAndRestore(double_checkpoint=True)`` falls back to its
backup. Real checkpoints, really truncated; both backends (the TF1 ``Saver``, ``tf.train.Checkpoint``).
"""

from __future__ import annotations

import csv
import glob
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import hookbus  # noqa: E402 - after the importorskip
from hookbus._cli._demo import build_linear_regression  # noqa: E402
from hookbus._tf._checkpoint_tf1 import checkpoint_problem  # noqa: E402
from hookbus.sinks import CheckpointSink, CSVSink, EarlyStoppingSink, StopAtStepSink  # noqa: E402

UNREADABLE = "cannot be restored"


def _truncate_data(prefix: str) -> None:
    """Cut the checkpoint's data file to half its size (a copy or a full disk that stopped short)."""
    (data,) = glob.glob(prefix + ".data-*")
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(size // 2)


def _steps(path: Path) -> list[int]:
    with path.open(newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f)]


def _saved_state(prefix: str, sink: str) -> dict[str, Any]:
    with open(prefix + ".hookbus.json", encoding="utf-8") as f:
        return dict(json.load(f)["sinks"][sink])


def _train_tf1(directory: Path, last_step: int) -> tuple[int, EarlyStoppingSink]:
    """One process's worth of TF1 training: fresh graph, bus and MonitoredTrainingSession."""
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        early = EarlyStoppingSink("loss", patience=1000)  # every step is an evaluation: its count is state
        for sink in (
            CheckpointSink(directory / "ckpt", every_n_steps=5, keep=3),
            CSVSink(directory / "m.csv", every_n_steps=1),
            early,
            StopAtStepSink(last_step=last_step),
        ):
            bus.attach(sink)
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(directory / "ckpt")) as s:
            first = bus.step
            while not s.should_stop():
                s.run(model.train_op)
    return first, early


def test_tf1_resume_falls_back_from_a_truncated_latest_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _train_tf1(tmp_path, 15)
    latest = str(tmp_path / "ckpt" / "model.ckpt-15")
    previous = str(tmp_path / "ckpt" / "model.ckpt-10")
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")) == latest
    _truncate_data(latest)
    problem = checkpoint_problem(latest)
    assert problem is not None
    assert "bytes" in problem
    assert checkpoint_problem(previous) is None
    saved = _saved_state(previous, "EarlyStoppingSink")
    with caplog.at_level(logging.WARNING, logger="hookbus"):
        first, early = _train_tf1(tmp_path, 20)
    warnings = [r.getMessage() for r in caplog.records if UNREADABLE in r.getMessage()]
    assert len(warnings) == 1
    assert latest in warnings[0]
    assert problem in warnings[0]
    assert previous in warnings[0]
    assert first == 10  # resumed from the previous checkpoint
    assert saved["seen"] == 10
    assert early.state.seen == 20  # its state from beside model.ckpt-10, then 10 more evaluations
    assert _steps(tmp_path / "m.csv") == list(range(1, 21))  # every row exactly once
    # The damaged checkpoint is kept aside for a person to look at, out of the pointer's way.
    assert glob.glob(str(tmp_path / "ckpt" / "unreadable" / "model.ckpt-15.*"))
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")).endswith("model.ckpt-20")
    assert checkpoint_problem(latest) is None  # step 15 was trained and saved again, whole


BATCH, STEPS_PER_EPOCH = 32, 4


def _fit(directory: Path, epochs: int, *, restore: bool) -> tuple[hookbus.EventBusCallback, EarlyStoppingSink]:
    """One process's worth of Keras training (fresh model and bus), resuming from ``directory``."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH * STEPS_PER_EPOCH, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
    bus = hookbus.EventBus()
    early = EarlyStoppingSink("loss", patience=1000, every_n_steps=1)
    bus.attach(CheckpointSink(directory / "ckpt", every_n_steps=STEPS_PER_EPOCH, keep=3))
    bus.attach(CSVSink(directory / "m.csv", every_n_steps=1))
    bus.attach(early)
    callback = hookbus.EventBusCallback(bus, keys=["loss"], restore=restore)
    with bus:
        model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[callback])
    return callback, early


def test_a_keras_resume_falls_back_from_a_truncated_latest_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _fit(tmp_path, 3, restore=False)
    latest = str(tmp_path / "ckpt" / "model.ckpt-12")
    previous = str(tmp_path / "ckpt" / "model.ckpt-8")
    _truncate_data(latest)
    with caplog.at_level(logging.WARNING, logger="hookbus"):
        callback, early = _fit(tmp_path, 5, restore=True)
    warnings = [r.getMessage() for r in caplog.records if UNREADABLE in r.getMessage()]
    assert len(warnings) == 1
    assert latest in warnings[0]
    assert previous in warnings[0]
    assert callback.restored_from == previous
    assert early.state.seen == 20  # 8 from the state beside model.ckpt-8, then steps 9..20
    assert _steps(tmp_path / "m.csv") == list(range(1, 21))
    assert checkpoint_problem(latest) is None  # trained and saved again


def test_no_readable_checkpoint_fails_before_step_1_naming_each(tmp_path: Path) -> None:
    _fit(tmp_path, 1, restore=False)
    only = str(tmp_path / "ckpt" / "model.ckpt-4")
    _truncate_data(only)
    with pytest.raises(RuntimeError, match="no checkpoint in .* can be restored") as raised:
        _fit(tmp_path, 2, restore=True)
    assert only in str(raised.value)
    assert not glob.glob(str(tmp_path / "ckpt" / "unreadable" / "*"))  # nothing moved: a person decides


def test_a_restore_without_a_checkpoint_sink_names_the_unreadable_checkpoint(tmp_path: Path) -> None:
    """``restore=<directory>`` with no sink to fall back: the error says which checkpoint, and why."""
    _fit(tmp_path, 2, restore=False)
    latest = str(tmp_path / "ckpt" / "model.ckpt-8")
    _truncate_data(latest)
    problem = checkpoint_problem(latest)
    assert problem is not None
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    bus = hookbus.EventBus()
    callback = hookbus.EventBusCallback(bus, keys=["loss"], restore=str(tmp_path / "ckpt"))
    x = np.zeros((BATCH, 4), "float32")
    with pytest.raises(RuntimeError, match="cannot restore checkpoint") as raised, bus:
        model.fit(x, np.zeros(BATCH, "int32"), batch_size=BATCH, epochs=1, verbose=0, callbacks=[callback])
    assert latest in str(raised.value)
    assert problem in str(raised.value)
