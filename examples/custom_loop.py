"""A GradientTape training loop observed through hookbus's loop publisher.

The loop calls ``loop.step(values)`` once per step with a dict of tensors; the publisher
converts them (``.numpy()``) only on steps where a subscriber is due, evaluates every few
hundred steps through ``loop.evaluate``, checkpoints through the ``tf.train.Checkpoint`` passed
in, and stops when a sink asks (``loop.should_stop``, looked at before each step, so a run
resumed after its stop trains nothing). Run it again with the same ``--dir`` and
it resumes from the checkpoint: another ``--steps`` steps, each CSV row once. From the
repository root, after the README's first command::

    .venv/bin/python examples/custom_loop.py [--steps 600] [--dir runs/loop]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import hookbus
from hookbus.sinks import CheckpointSink, ConsoleSink, CSVSink, NanGuardSink, StopAtStepSink, TensorBoardSink


def make_data(seed: int) -> tuple[tf.Tensor, tf.Tensor]:
    """y = sin(x0) + x1^2 / 4 with noise."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(2048, 2)).astype("float32")
    y = (np.sin(x[:, :1]) + x[:, 1:] ** 2 / 4 + rng.normal(scale=0.05, size=(2048, 1))).astype("float32")
    return tf.constant(x), tf.constant(y)


def train(directory: str, steps: int) -> int:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam(0.01)
    x, y = make_data(1)
    x_eval, y_eval = make_data(2)

    @tf.function
    def train_step(xb: tf.Tensor, yb: tf.Tensor) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return {"loss": loss, "grad_norm": tf.linalg.global_norm(grads)}

    @tf.function
    def eval_step() -> dict[str, tf.Tensor]:
        return {"loss": tf.reduce_mean(tf.square(model(x_eval) - y_eval))}

    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(run_name="custom loop", plain_every_n_secs=2.0))
    bus.attach(TensorBoardSink(os.path.join(directory, "tb"), every_n_steps=50))
    bus.attach(CSVSink(os.path.join(directory, "metrics.csv"), every_n_steps=25))
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt"), every_n_steps=200, every_n_secs=None))
    bus.attach(NanGuardSink("loss", every_n_steps=25))
    bus.attach(StopAtStepSink(num_steps=steps))
    loop = hookbus.LoopPublisher(
        bus,
        keys=["loss", "grad_norm"],
        eval_keys=["loss"],
        step_counter=optimizer.iterations,  # the step survives a restore
        checkpoint=tf.train.Checkpoint(model=model, optimizer=optimizer),
        restore=True,  # the CheckpointSink's directory; nothing there on a first run
    )
    batches = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).repeat().batch(64)
    with bus, loop:
        for xb, yb in batches:
            if loop.should_stop:  # before training: a run resumed after its stop trains nothing
                break
            loop.step(train_step(xb, yb))  # tensors; converted only when a sink is due
            if loop.global_step % 200 == 0:
                loop.evaluate(eval_step())
    return loop.global_step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="steps per run (default 600)")
    parser.add_argument("--dir", default="runs/loop", help="output directory (default runs/loop)")
    args = parser.parse_args(argv)
    directory = args.dir
    step = train(directory, args.steps)
    print(f"trained to step {step}; outputs in {directory}: metrics.csv, tb/, ckpt/")


if __name__ == "__main__":
    main()
