"""The seed's linear regression, done right: train, evaluate from the checkpoint, print what
subscribers received.

The seed's ``LoggingHook`` looked tensors up in ``before_run`` but never asked the session to
fetch them, so ``run_values.results`` held nothing. Here one ``EventBusHook`` fetches the loss and
accuracy on the steps a subscriber is due (and only then), and plain functions receive them as
Python floats.

From the repository root, after the README's first command::

    .venv/bin/python examples/linear_regression.py [--steps 1000] [--dir runs/linear]

Run it again with the same ``--dir`` and training resumes from the checkpoint there.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import hookbus
from hookbus.sinks import CheckpointSink

v1 = tf.compat.v1


def build(features: int = 3, seed: int = 0) -> dict[str, object]:
    """y = x·w + b on synthetic data; a train input that repeats, an eval input that ends."""
    rng = np.random.default_rng(seed)
    true_w = rng.normal(size=(features, 1)).astype("float32")
    x_train = rng.normal(size=(4096, features)).astype("float32")
    y_train = x_train @ true_w + 0.5 + rng.normal(scale=0.1, size=(4096, 1)).astype("float32")
    x_eval = rng.normal(size=(512, features)).astype("float32")
    y_eval = x_eval @ true_w + 0.5

    global_step = v1.train.get_or_create_global_step()
    weights = v1.get_variable("weights", [features, 1], initializer=v1.zeros_initializer())
    bias = v1.get_variable("bias", [1], initializer=v1.zeros_initializer())

    def model(x: tf.Tensor, y: tf.Tensor, suffix: str) -> tuple[tf.Tensor, tf.Tensor]:
        prediction = tf.matmul(x, weights) + bias
        loss = tf.reduce_mean(tf.square(prediction - y), name="loss" + suffix)
        accuracy = tf.reduce_mean(tf.cast(tf.abs(prediction - y) < 0.25, tf.float32), name="accuracy" + suffix)
        return loss, accuracy

    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(4096, seed=seed).repeat().batch(32)
    x, y = v1.data.make_one_shot_iterator(train).get_next()
    loss, _ = model(x, y, "")
    train_op = v1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=global_step)
    evaluation = tf.data.Dataset.from_tensor_slices((x_eval, y_eval)).batch(128)
    ex, ey = v1.data.make_one_shot_iterator(evaluation).get_next()  # restarts in every session
    eval_loss, eval_accuracy = model(ex, ey, "_eval")
    return {"loss": loss, "train_op": train_op, "eval_loss": eval_loss, "eval_accuracy": eval_accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--dir", default="runs/linear", help="checkpoint folder (default runs/linear)")
    args = parser.parse_args()
    directory = args.dir

    with tf.Graph().as_default():
        t = build()
        bus = hookbus.EventBus()

        @bus.on("after_run", every_n_steps=100, keys=["loss", "accuracy"])
        def report(event: hookbus.Event) -> None:
            print(f"step {event.step:5d}  loss {event.values['loss']:.5f}  accuracy {event.values['accuracy']:.3f}")

        @bus.on("after_run", keys=["eval/loss", "eval/accuracy"])
        def report_eval(event: hookbus.Event) -> None:
            print(f"eval at step {event.step}: {dict(event.values)}")

        bus.attach(CheckpointSink(directory, every_n_steps=500, keep=2))
        train = hookbus.EventBusHook(bus, fetches={"loss": t["loss"], "accuracy": "accuracy:0"}, train_op=t["train_op"])
        evaluate = hookbus.EventBusHook(
            bus, fetches={"loss": t["eval_loss"], "accuracy": t["eval_accuracy"]}, mode="eval"
        )
        with bus:
            with hookbus.monitored_training_session(hooks=[train], checkpoint_dir=directory) as session:
                for _ in range(args.steps):
                    session.run(t["train_op"])
            # Evaluate the checkpoint training ended with; the eval input ends (OutOfRangeError),
            # which MonitoredSession treats as a clean end: the mean over its batches is published.
            creator = v1.train.ChiefSessionCreator(checkpoint_dir=directory)
            with v1.train.MonitoredSession(session_creator=creator, hooks=[evaluate]) as session:
                while not session.should_stop():
                    session.run([t["eval_loss"], t["eval_accuracy"]])
    print(f"latest checkpoint: {tf.train.latest_checkpoint(directory)}")


if __name__ == "__main__":
    tf.compat.v1.disable_eager_execution()
    main()
