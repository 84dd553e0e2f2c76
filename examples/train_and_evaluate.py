"""Train and evaluate, as the seed did with estimator.train / estimator.evaluate, until a sink stops.

Each round trains a few hundred steps (checkpointed at the end), then evaluates that checkpoint in
a fresh session; EarlyStoppingSink watches ``eval/loss`` and ends the run at the evaluation its
rule implies. From the repository root, after the README's first command::

    .venv/bin/python examples/train_and_evaluate.py [--dir runs/train-eval] [--patience 2]

Run it again with the same ``--dir`` and it resumes where it ended: step numbering, CSV rows and
early stopping's state continue, so a run that stopped early stops again at once, and one given
more patience (``--patience 4``) trains on from there.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

import hookbus
from hookbus.sinks import CheckpointSink, CSVSink, EarlyStoppingSink, StopAtStepSink

v1 = tf.compat.v1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="runs/train-eval", help="output folder (default runs/train-eval)")
    parser.add_argument("--patience", type=int, default=2)
    parser.add_argument("--steps-per-round", type=int, default=300)
    parser.add_argument("--last-step", type=int, default=6000)
    args = parser.parse_args()
    directory = args.dir
    checkpoints = os.path.join(directory, "ckpt")

    with tf.Graph().as_default():
        global_step = v1.train.get_or_create_global_step()
        # y = 2x - 1 with noise; every step its own batch, seeded by the step (resumes continue it).
        seed = tf.stack([tf.constant(7, tf.int64), tf.cast(global_step, tf.int64)])
        x = tf.random.stateless_normal([64, 1], seed=seed)
        y = 2.0 * x - 1.0 + 0.3 * tf.random.stateless_normal([64, 1], seed=seed + 1)
        held_x = tf.linspace(-3.0, 3.0, 200)[:, None]
        w = v1.get_variable("w", [1, 1], initializer=v1.zeros_initializer())
        b = v1.get_variable("b", [1], initializer=v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        eval_loss = tf.reduce_mean(tf.square(tf.matmul(held_x, w) + b - (2.0 * held_x - 1.0)))
        train_op = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=global_step)

        bus = hookbus.EventBus()
        bus.attach(CheckpointSink(checkpoints, every_n_secs=None, keep=3))  # saves at each round's end
        bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=args.patience, min_delta=1e-4))
        bus.attach(StopAtStepSink(last_step=args.last_step))
        bus.attach(CSVSink(os.path.join(directory, "metrics.csv"), every_n_steps=50))
        bus.on(
            "after_run", lambda e: print(f"eval at step {e.step}: loss {e.values['eval/loss']:.6f}"), keys="eval/loss"
        )
        bus.on("stop_requested", lambda r: print(f"stop at step {r.step}: {r.reason}"))
        train = hookbus.EventBusHook(bus, {"loss": loss}, train_op=train_op)
        evaluate = hookbus.EventBusHook(bus, {"loss": eval_loss}, mode="eval")
        with bus:
            rounds = hookbus.train_and_evaluate(
                bus,
                train_op=train_op,
                eval_fetches=eval_loss,
                checkpoint_dir=checkpoints,
                steps_per_round=args.steps_per_round,
                train_hooks=[train],
                eval_hooks=[evaluate],
                eval_steps=1,
            )
    print(f"{rounds} evaluation(s); latest checkpoint {tf.train.latest_checkpoint(checkpoints)}")
    print(f"metrics: {os.path.join(directory, 'metrics.csv')} and metrics.eval.csv")


if __name__ == "__main__":
    v1.disable_eager_execution()
    main()
