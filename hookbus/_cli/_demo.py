"""``hookbus demo``: the seed's linear regression, trained on built-in synthetic data.

The tests build the seed's model as it was (:func:`build_linear_regression` with its defaults,
which converges within a hundred steps). The demo builds it ill-conditioned
(:func:`build_demo_regression`): features on scales from 1 down to 0.05, with a true model that
weighs every direction alike, so plain gradient descent learns the large directions in tens of
steps and the small ones over a thousand. Training loss falls over the whole run; evaluation on
a noisy held-out set improves, then flattens at the noise floor, where early stopping decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hookbus._tf._import import require_tensorflow

__all__ = ["LinearRegression", "build_demo_regression", "build_linear_regression"]


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
    learning_rate: Any = None  #: the rate variable, when built with ``rate_variable=True``


def build_linear_regression(
    *,
    features: int = 3,
    batch_size: int = 32,
    learning_rate: float = 0.05,
    noise: float = 0.1,
    seed: int = 0,
    scales: Sequence[float] | None = None,
    noisy_eval: bool = False,
    rate_variable: bool = False,
) -> LinearRegression:
    """Build the seed's model, fixed: y = x·w + b on synthetic data, squared loss, SGD.

    The training batch is drawn anew every step from a fixed random true model; the
    evaluation batch is a fixed held-out set. ``accuracy`` is the share of predictions within
    0.25 of the target, named ``accuracy:0`` as in the seed.

    ``scales`` (one per feature, default all 1) multiplies each feature, and the true weights
    are divided by it, so every direction weighs alike in the loss but gradient descent learns
    the small ones slowly. ``noisy_eval`` adds the same label noise to the held-out set (its
    loss then flattens at ``noise ** 2`` instead of falling towards 0). ``rate_variable`` trains
    with the rate in a variable (``learning_rate``), for sinks that steer it.
    """
    import numpy as np

    tf = require_tensorflow("the demo model")

    v1 = tf.compat.v1
    rng = np.random.default_rng(seed)
    scale = np.ones((1, features), "float32") if scales is None else np.asarray(scales, "float32").reshape(1, features)
    true_w = (rng.normal(size=(features, 1)) / scale.T).astype("float32")
    true_b = np.float32(rng.normal())
    global_step = v1.train.get_or_create_global_step()

    def batch(n: int) -> tuple[Any, Any]:
        # Seeded by the step: every step its own batch, and a resumed run continues the same
        # sequence (a graph-level seed would replay the first batches in every new session).
        step_seed = tf.stack([tf.constant(seed, tf.int64), tf.cast(global_step, tf.int64)])
        x = tf.random.stateless_normal([n, features], seed=step_seed) * scale
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
    rate = (
        v1.get_variable("learning_rate", initializer=np.float32(learning_rate), trainable=False)
        if rate_variable
        else None
    )
    optimizer = v1.train.GradientDescentOptimizer(learning_rate if rate is None else rate)
    train_op = optimizer.minimize(loss, global_step=global_step)
    held_x = tf.constant((rng.normal(size=(256, features)) * scale).astype("float32"))
    held_y = tf.matmul(held_x, true_w) + true_b
    if noisy_eval:
        held_y += tf.constant((noise * rng.normal(size=(256, 1))).astype("float32"))
    eval_loss, eval_accuracy = metrics(held_x, held_y, "_eval")
    return LinearRegression(global_step, loss, accuracy, train_op, eval_loss, eval_accuracy, weights, bias, rate)


#: The demo's training batch: what its hook declares (``batch_size=``), so its views show examples/s.
DEMO_BATCH = 32


def build_demo_regression(*, seed: int = 0, rate_variable: bool = False) -> LinearRegression:
    """The demo's problem: the seed's regression, ill-conditioned so learning shows for the whole run.

    Six features on scales from 1 down to 0.05 (log-spaced), label noise 0.15 (an evaluation
    loss floor near 0.02), batches of 32, gradient descent at 0.2: the training loss falls from
    about 7 over a thousand steps or more, accuracy (within 0.25 of the target) climbs from near
    0 to about 0.9, and evaluation flattens after about 1,500 steps.
    """
    import numpy as np

    return build_linear_regression(
        features=6,
        batch_size=DEMO_BATCH,
        learning_rate=0.2,
        noise=0.15,
        seed=seed,
        scales=[float(s) for s in np.logspace(0.0, -1.3, 6)],
        noisy_eval=True,
        rate_variable=rate_variable,
    )
