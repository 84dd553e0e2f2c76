"""``hookbus demo``: the seed's linear regression, trained on built-in synthetic data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hookbus._tf import require_tensorflow

__all__ = ["LinearRegression", "build_linear_regression"]


@dataclass
class LinearRegression:
    """The tensors of the demo graph (built in the current default graph)."""

    global_step: Any
    loss: Any
    accuracy: Any
    train_op: Any
    eval_loss: Any
    eval_accuracy: Any
    weights: Any
    bias: Any


def build_linear_regression(
    *,
    features: int = 3,
    batch_size: int = 32,
    learning_rate: float = 0.05,
    noise: float = 0.1,
    seed: int = 0,
) -> LinearRegression:
    """Build the seed's model, fixed: y = x·w + b on synthetic data, squared loss, SGD.

    The training batch is drawn anew every step from a fixed random true model; the
    evaluation batch is a fixed held-out set. ``accuracy`` is the share of predictions within
    0.25 of the target, named ``accuracy:0`` as in the seed.
    """
    import numpy as np
    tf = require_tensorflow("the demo model")

    v1 = tf.compat.v1
    rng = np.random.default_rng(seed)
    true_w = rng.normal(size=(features, 1)).astype("float32")
    true_b = np.float32(rng.normal())
    global_step = v1.train.get_or_create_global_step()

    def batch(n: int) -> tuple[Any, Any]:
        # Seeded by the step: every step its own batch, and a resumed run continues the same
        # sequence (a graph-level seed would replay the first batches in every new session).
        step_seed = tf.stack([tf.constant(seed, tf.int64), tf.cast(global_step, tf.int64)])
        x = tf.random.stateless_normal([n, features], seed=step_seed)
        y = tf.matmul(x, true_w) + true_b + noise * tf.random.stateless_normal([n, 1], seed=step_seed + 1)
        return x, y

    weights = v1.get_variable("weights", [features, 1], initializer=v1.zeros_initializer())
    bias = v1.get_variable("bias", [1], initializer=v1.zeros_initializer())

    def metrics(x: Any, y: Any, suffix: str) -> tuple[Any, Any]:
        prediction = tf.matmul(x, weights) + bias
        loss = tf.reduce_mean(tf.square(prediction - y), name="loss" + suffix)
        accuracy = tf.reduce_mean(tf.cast(tf.abs(prediction - y) < 0.25, tf.float32), name="accuracy" + suffix)
        return loss, accuracy

    x, y = batch(batch_size)
    loss, accuracy = metrics(x, y, "")
    train_op = v1.train.GradientDescentOptimizer(learning_rate).minimize(loss, global_step=global_step)
    held_x = tf.constant(rng.normal(size=(256, features)).astype("float32"))
    held_y = tf.matmul(held_x, true_w) + true_b
    eval_loss, eval_accuracy = metrics(held_x, held_y, "_eval")
    return LinearRegression(global_step, loss, accuracy, train_op, eval_loss, eval_accuracy, weights, bias)
