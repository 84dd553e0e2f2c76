"""Forgetting ``with bus:`` loses nothing on a clean end: a real process per the three publishers."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

CHILD = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import tensorflow as tf
    import keras
    import hookbus
    from hookbus.sinks import CheckpointSink, CSVSink

    out = sys.argv[1]

    # 1. EventBusHook under MonitoredTrainingSession (graph mode), no `with bus:`.
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", initializer=3.0)
        loss = tf.square(w - 1.0)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
        bus = hookbus.EventBus()
        bus.attach(CSVSink(os.path.join(out, "hook.csv"), every_n_steps=1, flush_secs=3600))
        bus.attach(CheckpointSink(os.path.join(out, "hook-ckpt"), every_n_steps=None, every_n_secs=None))
        hook = hookbus.EventBusHook(bus, {"loss": loss}, train_op=train_op)
        with hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=os.path.join(out, "hook-ckpt")) as s:
            for _ in range(40):
                s.run(train_op)

    # 2. LoopPublisher in an eager loop, no `with loop:` and no `with bus:`.
    loop_bus = hookbus.EventBus()
    loop_bus.attach(CSVSink(os.path.join(out, "loop.csv"), every_n_steps=1, flush_secs=3600))
    loop = hookbus.LoopPublisher(loop_bus, keys="loss")
    loop.begin()
    v = tf.Variable(3.0)
    for _ in range(30):
        v.assign_sub(0.1)
        loop.step({"loss": float(v.numpy())})
    loop.end()

    # 3. Keras fit with the callback, no `with bus:`.
    keras_bus = hookbus.EventBus()
    keras_bus.attach(CSVSink(os.path.join(out, "keras.csv"), every_n_steps=1, flush_secs=3600))
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(64, 2)).astype("float32")
    model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=[hookbus.EventBusCallback(keras_bus)])

    # 4. train_and_evaluate: many sessions in one implicit run, no `with bus:`.
    from hookbus._cli._demo import build_linear_regression
    with tf.Graph().as_default():
        m = build_linear_regression()
        te_bus = hookbus.EventBus()
        te_bus.attach(CSVSink(os.path.join(out, "te.csv"), every_n_steps=10, flush_secs=3600))
        te_bus.attach(CheckpointSink(os.path.join(out, "te-ckpt"), every_n_secs=None))
        train = hookbus.EventBusHook(te_bus, {"loss": m.loss}, train_op=m.train_op)
        evaluate = hookbus.EventBusHook(te_bus, {"loss": m.eval_loss}, mode="eval")
        hookbus.train_and_evaluate(
            te_bus, train_op=m.train_op, eval_fetches=m.eval_loss, checkpoint_dir=os.path.join(out, "te-ckpt"),
            steps_per_round=50, train_hooks=[train], eval_hooks=[evaluate], eval_steps=1, max_rounds=3,
        )
    print("exiting without with bus", flush=True)
    """
)


def _steps(path: Path) -> list[int]:
    with open(path, newline="") as file:
        return [int(row["step"]) for row in csv.DictReader(file)]


def test_every_publisher_without_with_bus_writes_everything_by_a_normal_exit(tmp_path: Path) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, env=env, timeout=240, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "exiting without with bus" in result.stdout
    assert _steps(tmp_path / "hook.csv") == list(range(1, 41))
    assert _steps(tmp_path / "loop.csv") == list(range(1, 31))
    assert _steps(tmp_path / "keras.csv") == list(range(1, 17))  # 2 epochs x 8 batches
    assert (tmp_path / "hook-ckpt" / "model.ckpt-40.index").exists()  # the end-of-session save
    assert "ended.hookbus.json" in os.listdir(tmp_path / "hook-ckpt")  # the implicit run closed at exit
    assert _steps(tmp_path / "te.csv") == list(range(10, 151, 10))  # three sessions, one run
    assert _steps(tmp_path / "te.eval.csv") == [50, 100, 150]
