"""The TF1 models and hook sets that ``bench/overhead.py`` compares (the floor is defined there).

Each function builds in the current default graph; :func:`hookbus_hook` and :func:`native_hooks`
do the same work at a cadence (a dict of ``console_secs``, ``csv``, ``nan``, ``tb``, ``es``,
``ckpt``: seconds, resp. steps, between due points).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import tensorflow as tf
from rich.console import Console

import hookbus
from hookbus._cli._demo import build_linear_regression
from hookbus.sinks import (
    CheckpointSink,
    ConsoleSink,
    CSVSink,
    EarlyStoppingSink,
    NanGuardSink,
    TensorBoardSink,
)

v1 = tf.compat.v1
NEVER = 10**9  # a step multiple no benchmark reaches: attached, never due


class EmptyHook(v1.train.SessionRunHook):  # type: ignore[misc]
    """A hook that overrides nothing: what MonitoredSession charges for one more hook."""


class FetchFloor(v1.train.SessionRunHook):  # type: ignore[misc]
    """Fetches ``fetches`` every ``n`` training steps and does nothing with them."""

    def __init__(self, fetches: dict[str, Any], n: int) -> None:
        self.args = v1.train.SessionRunArgs(fetches)
        self.n = n
        self.count = 0

    def before_run(self, run_context: Any) -> Any:
        self.count += 1
        return self.args if self.count % self.n == 0 else None


@dataclass
class Model:
    """The tensors a configuration needs."""

    loss: Any
    accuracy: Any
    train_op: Any
    summary: Any
    learning_rate: Any


def _dense(x: Any, units: int, name: str, activation: Any = None) -> Any:
    with v1.variable_scope(name):
        w = v1.get_variable("kernel", [int(x.shape[-1]), units], initializer=v1.glorot_uniform_initializer())
        b = v1.get_variable("bias", [units], initializer=v1.zeros_initializer())
    y = tf.matmul(x, w) + b
    return activation(y) if activation is not None else y


def build(kind: str) -> Model:
    """The seed's linear regression, or a wider MLP (about a millisecond per step on 2 cores).

    Both train with their rate in a non-trainable variable, what a run whose rate a sink steers
    has (every configuration trains the same graph; ``hookbus-quiet-lr`` offers it to its sinks).
    """
    if kind == "linear":
        rate: Any = v1.Variable(0.05, trainable=False, name="learning_rate")
        m = build_linear_regression(learning_rate=rate)
        loss, accuracy, train_op = m.loss, m.accuracy, m.train_op
    else:
        global_step = v1.train.get_or_create_global_step()
        x = v1.random_normal([64, 128], seed=1)
        y = tf.reduce_sum(x[:, :8], axis=1, keepdims=True)
        h = x
        for i in range(2):
            h = _dense(h, 128, f"dense{i}", tf.nn.relu)
        prediction = _dense(h, 1, "out")
        loss = tf.reduce_mean(tf.square(prediction - y), name="loss")
        accuracy = tf.reduce_mean(tf.cast(tf.abs(prediction - y) < 0.5, tf.float32), name="accuracy")
        rate = v1.Variable(1e-4, trainable=False, name="learning_rate")
        train_op = v1.train.AdamOptimizer(rate).minimize(loss, global_step=global_step)
    v1.summary.scalar("loss", loss)
    v1.summary.scalar("accuracy", accuracy)
    return Model(loss, accuracy, train_op, v1.summary.merge_all(), rate)


def native_hooks(model: Model, directory: str, cadence: dict[str, float]) -> list[Any]:
    """TensorFlow's own hooks at ``cadence``."""
    secs = cadence["console_secs"]
    logging_hook = (
        v1.train.LoggingTensorHook({"loss": model.loss, "accuracy": model.accuracy}, every_n_secs=secs)
        if secs
        else v1.train.LoggingTensorHook({"loss": model.loss, "accuracy": model.accuracy}, every_n_iter=1)
    )
    return [
        logging_hook,
        v1.train.SummarySaverHook(save_steps=int(cadence["tb"]), output_dir=directory, summary_op=model.summary),
        v1.train.CheckpointSaverHook(directory, save_steps=int(cadence["ckpt"])),
        v1.train.NanTensorHook(model.loss),
        v1.train.StepCounterHook(every_n_steps=int(cadence["tb"]), output_dir=directory),
    ]


def hookbus_hook(
    model: Model, directory: str, cadence: dict[str, float], quiet: bool, sink_file: Any, *, rate: bool = False
) -> tuple[hookbus.EventBus, hookbus.EventBusHook]:
    """One EventBusHook and the sinks equivalent to :func:`native_hooks` (never due if ``quiet``);
    ``rate``: the hook offers the model's learning rate too (issue 27's key, packed on due steps)."""

    def steps(n: float) -> int:
        return NEVER if quiet else int(n)

    bus = hookbus.EventBus()
    console = Console(file=sink_file, force_terminal=False, width=120)
    if quiet:  # the time rule stays (the clock is read every step); it fires once, in the warm-up
        schedule: dict[str, Any] = {"every_n_secs": 1e6}
    elif cadence["console_secs"]:
        schedule = {"every_n_secs": cadence["console_secs"]}
    else:
        schedule = {"every_n_steps": 1}
    # plain_every_n_secs=0: a line each time it is due, the work LoggingTensorHook does.
    bus.attach(ConsoleSink(console, live=False, plain_every_n_secs=0, **schedule))
    # throughput=False: steps/sec alone, the scalars SummarySaverHook and StepCounterHook write
    bus.attach(TensorBoardSink(os.path.join(directory, "tb"), every_n_steps=steps(cadence["tb"]), throughput=False))
    bus.attach(CSVSink(os.path.join(directory, "metrics.csv"), every_n_steps=steps(cadence["csv"])))
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt"), every_n_steps=steps(cadence["ckpt"]), every_n_secs=None))
    bus.attach(NanGuardSink("loss", every_n_steps=steps(cadence["nan"])))
    bus.attach(EarlyStoppingSink(monitor="loss", patience=NEVER, every_n_steps=steps(cadence["es"])))
    hook = hookbus.EventBusHook(
        bus,
        fetches={"loss": model.loss, "accuracy": model.accuracy},
        train_op=model.train_op,
        learning_rate=model.learning_rate if rate else None,
    )
    return bus, hook


@contextlib.contextmanager
def tensorflow_logging_to(stream: Any) -> Iterator[None]:
    """Send TensorFlow's logger (LoggingTensorHook's output) at INFO to ``stream``, then restore."""
    logger = tf.get_logger()
    saved = (logger.handlers[:], logger.level, logger.propagate)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname).1s%(asctime)s %(filename)s:%(lineno)d] %(message)s"))
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers, level, logger.propagate = saved[0], saved[1], saved[2]
        logger.setLevel(level)
