"""``EventBusHook(feed_fn=...)`` as TensorFlow's ``FeedFnHook``: every run gets the function's feeds.

Ported from TensorFlow's ``FeedFnHookTest`` (basic_session_run_hooks_test.py), then the same
training fed by ``FeedFnHook`` and by hookbus's hook side by side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1

import hookbus  # noqa: E402 - after the importorskip
from hookbus.sinks import StopAtStepSink  # noqa: E402


def test_feeding_placeholder_as_feed_fn_hook_test() -> None:
    with tf.Graph().as_default(), v1.Session() as sess:
        x = v1.placeholder(dtype=tf.float32)
        y = x + 1
        hook = hookbus.EventBusHook(hookbus.EventBus(), feed_fn=lambda: {x: 1.0})
        hook.begin()
        mon_sess = v1.train.MonitoredSession(session_creator=_Existing(sess), hooks=[hook])
        assert mon_sess.run(y) == 2


class _Existing:
    """A session creator handing out a session made beforehand (TF's test wraps one in _HookedSession)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def create_session(self) -> Any:
        return self.session


def _batches() -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 1)).astype("float32")) for _ in range(30)]


def _train(make_hooks: Any, bus: hookbus.EventBus | None = None) -> tuple[list[float], int]:
    """A regression fed batch by batch through a hook's ``feed_fn``; the losses and the last step."""
    with tf.Graph().as_default():
        global_step = v1.train.get_or_create_global_step()
        x = v1.placeholder(tf.float32, [None, 3])
        y = v1.placeholder(tf.float32, [None, 1])
        w = v1.get_variable("w", [3, 1], initializer=v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        train_op = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
        batches = iter(_batches())

        def feed() -> dict[Any, Any]:
            bx, by = next(batches)
            return {x: bx, y: by}

        losses: list[float] = []
        with v1.train.MonitoredTrainingSession(hooks=make_hooks(feed, loss, train_op)) as sess:
            while not sess.should_stop():
                losses.append(float(sess.run([train_op, loss])[1]))
    step = len(losses) if bus is None else bus.step  # one step a run, from 0
    return losses, step


def test_a_training_fed_by_feed_fn_trains_as_one_fed_by_feed_fn_hook() -> None:
    def theirs(feed: Any, loss: Any, train_op: Any) -> list[Any]:
        return [v1.train.FeedFnHook(feed), v1.train.StopAtStepHook(last_step=20)]

    bus = hookbus.EventBus()
    bus.attach(StopAtStepSink(last_step=20))
    published: list[tuple[int, float]] = []
    bus.on("after_run", lambda e: published.append((e.step, e.values["loss"])), every_n_steps=5, keys="loss")

    def ours(feed: Any, loss: Any, train_op: Any) -> list[Any]:
        return [hookbus.EventBusHook(bus, {"loss": loss}, train_op=train_op, feed_fn=feed)]

    their_losses, their_step = _train(theirs)
    with bus:
        our_losses, our_step = _train(ours, bus)
    assert our_step == their_step == 20
    assert our_losses == their_losses  # the same batches, in the same order, one per run
    # The hook's own fetches (loss, on due steps) ran on the fed batch of their run.
    assert published == [(s, our_losses[s - 1]) for s in (5, 10, 15, 20)]


def test_feed_fn_must_be_a_function_and_return_a_feed_dict() -> None:
    with pytest.raises(TypeError, match=r"feed_fn must be a function returning a feed_dict, or None \(got 3\)"):
        hookbus.EventBusHook(hookbus.EventBus(), feed_fn=3)  # type: ignore[arg-type]
    with tf.Graph().as_default():
        x = v1.placeholder(tf.float32)
        y = x + 1
        hook = hookbus.EventBusHook(hookbus.EventBus(), feed_fn=lambda: [x, 1.0])  # type: ignore[arg-type,return-value]
        with (
            pytest.raises(TypeError, match="feed_fn must return a feed_dict mapping placeholders to values"),
            v1.train.MonitoredSession(hooks=[hook]) as sess,
        ):
            sess.run(y)
