"""A custom loop resumed after its stop trains no step, as the Keras callback trains no batch.

The same model, data and sinks (early stopping with restore-best, checkpoints every epoch)
behind the loop publisher, written as docs/guides/keras-and-loops.md and ``examples/custom_loop.py`` show, and
behind ``EventBusCallback`` in ``fit``: stopped early, then restarted twice from the same
directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _keras_data import data

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from hookbus import EventBus, EventBusCallback, LoopPublisher  # noqa: E402 - after the importorskip
from hookbus.sinks import CheckpointSink, EarlyStoppingSink  # noqa: E402

STEPS_PER_EPOCH = 4  # 128 examples in batches of 32
EPOCHS = 40


TRAIN, VAL = data(128, 0), data(64, 1)


def model() -> Any:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    m.compile(optimizer=keras.optimizers.Adam(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def sinks(directory: Path) -> list[Any]:
    return [
        EarlyStoppingSink("eval/loss", patience=3, restore_best=True),
        # keep = patience + 1: the best epoch's checkpoint is the oldest kept at the stop.
        CheckpointSink(directory, every_n_steps=STEPS_PER_EPOCH, every_n_secs=None, keep=4),
    ]


def fit(directory: Path) -> tuple[Any, EventBus]:
    bus, m = EventBus(), model()
    for sink in sinks(directory):
        bus.attach(sink)
    with bus:
        callback = EventBusCallback(bus, keys=["loss"], restore=True)
        m.fit(*TRAIN, epochs=EPOCHS, validation_data=VAL, callbacks=[callback], batch_size=32, verbose=0)
    return m, bus


Loop = Callable[[LoopPublisher, Any, Callable[[Any, Any], Any], Callable[[], Any]], None]


def documented(loop: LoopPublisher, batches: Any, train_step: Callable[[Any, Any], Any], evaluate: Any) -> None:
    """The loop as docs/guides/keras-and-loops.md "Keras and custom loops" and examples/custom_loop.py write it."""
    for xb, yb in batches:
        if loop.should_stop:
            break
        loop.step(train_step(xb, yb))
        if loop.global_step % STEPS_PER_EPOCH == 0:
            loop.evaluate(evaluate())


def checked_after(loop: LoopPublisher, batches: Any, train_step: Callable[[Any, Any], Any], evaluate: Any) -> None:
    """The shape the README showed before: the stop is looked at only after a step."""
    for xb, yb in batches:
        loop.step(train_step(xb, yb))
        if loop.global_step % STEPS_PER_EPOCH == 0:
            loop.evaluate(evaluate())
        if loop.should_stop:
            break


def custom(directory: Path, shape: Loop = documented) -> tuple[Any, EventBus]:
    bus, m = EventBus(), model()
    for sink in sinks(directory):
        bus.attach(sink)
    optimizer, loss_fn = m.optimizer, m.loss

    @tf.function  # type: ignore[untyped-decorator]
    def train_step(x: Any, y: Any) -> dict[str, Any]:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, m(x, training=True))
        grads = tape.gradient(loss, m.trainable_variables)
        optimizer.apply_gradients(zip(grads, m.trainable_variables, strict=True))
        return {"loss": loss}

    def evaluate() -> dict[str, Any]:
        return {"loss": loss_fn(VAL[1], m(VAL[0]))}

    loop = LoopPublisher(
        bus,
        keys=["loss"],
        eval_keys=["loss"],
        step_counter=optimizer.iterations,
        checkpoint=tf.train.Checkpoint(model=m, optimizer=optimizer),
        restore=True,
        weights=m.weights,
    )
    batches = tf.data.Dataset.from_tensor_slices(TRAIN).batch(32).repeat(EPOCHS)
    with bus, loop:
        shape(loop, batches, train_step, evaluate)
    return m, bus


def checkpoints(directory: Path) -> list[int]:
    """The steps of the checkpoints in ``directory``."""
    return sorted(int(n[: -len(".index")].rsplit("-", 1)[1]) for n in os.listdir(directory) if n.endswith(".index"))


def checkpoint_weights(directory: Path, step: int) -> list[Any]:
    fresh = model()
    tf.train.Checkpoint(model=fresh).read(str(directory / f"model.ckpt-{step}")).expect_partial()
    return list(fresh.get_weights())


def same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("publisher", [custom, fit], ids=["custom loop", "keras fit"])
def test_a_run_resumed_after_its_early_stop_trains_no_step(
    tmp_path: Path, publisher: Callable[[Path], tuple[Any, EventBus]]
) -> None:
    first, bus = publisher(tmp_path)
    stopped = int(first.optimizer.iterations.numpy())
    assert stopped < EPOCHS * STEPS_PER_EPOCH
    assert bus.stop_reason is not None
    assert "did not improve" in bus.stop_reason
    kept = checkpoints(tmp_path)
    assert kept[-1] == stopped
    for _ in range(2):  # on every restart
        again, bus = publisher(tmp_path)
        assert int(again.optimizer.iterations.numpy()) == stopped  # not one step trained
        assert (bus.stop_reason or "").endswith("(before the restart)")
        assert bus.step == stopped
        assert checkpoints(tmp_path) == kept  # no checkpoint past the stop, none pruned
        if publisher is fit:
            # Restore-best's weights again: read from the best epoch's checkpoint, still kept.
            assert same(again.get_weights(), first.get_weights())
        else:
            # The weights the stop left (the loop publisher reads no weights from a user's
            # checkpoint: restore-best keeps them only within a run).
            assert same(again.get_weights(), checkpoint_weights(tmp_path, stopped))


def test_a_step_after_the_stop_is_refused(tmp_path: Path) -> None:
    """A loop that trains before it looks at ``should_stop`` (the README's earlier shape): the
    resumed run's first ``loop.step`` raises, naming what to do, and nothing is counted, published
    or saved: no checkpoint past the stop, the oldest (the best epoch's) not pruned."""
    first, _ = custom(tmp_path, checked_after)  # the first run stops at a step: no difference
    stopped = int(first.optimizer.iterations.numpy())
    kept = checkpoints(tmp_path)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=rf"after the loop was asked to stop at step {stopped} .*should_stop"):
            custom(tmp_path, checked_after)
        assert checkpoints(tmp_path) == kept
    again, _ = custom(tmp_path)
    assert int(again.optimizer.iterations.numpy()) == stopped
    assert same(again.get_weights(), checkpoint_weights(tmp_path, stopped))
