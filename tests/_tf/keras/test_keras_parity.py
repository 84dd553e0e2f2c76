"""Differential tests against Keras's own callbacks on the same training: restore-best as
``EarlyStopping(restore_best_weights=True)``, resuming as ``BackupAndRestore``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pytest
from _keras_data import KERAS_NP_ARRAY, classifier, data

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tensorboard.backend.event_processing import event_accumulator  # noqa: E402

from hookbus import EventBus, EventBusCallback  # noqa: E402 - after the importorskip
from hookbus.sinks import CheckpointSink, EarlyStoppingSink, TensorBoardSink  # noqa: E402

STEPS_PER_EPOCH = 4  # 128 examples in batches of 32
FIT = {"batch_size": 32, "verbose": 0}


class Stopping(TypedDict):
    """The arguments Keras's EarlyStopping and EarlyStoppingSink share: one dict, given to both."""

    patience: int
    min_delta: float


TRAIN, VAL = data(128, 0), data(64, 1)


def model() -> Any:
    return classifier(keras.optimizers.Adam(0.1), ["accuracy"])


class EpochWeights(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """The model's weights at every epoch end, by epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.weights: dict[int, list[Any]] = {}

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.weights[epoch] = self.model.get_weights()


class InterruptAt(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Raises when ``epoch`` begins: a run killed between epochs."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if epoch == self.epoch:
            raise RuntimeError(f"interrupted at epoch {epoch}")


def same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(np.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in zip(a, b, strict=True))


def accumulator(logdir: Path) -> Any:
    reader = event_accumulator.EventAccumulator(str(logdir), size_guidance={"tensors": 0, "scalars": 0})
    reader.Reload()
    return reader


def tensors(logdir: Path, tag: str) -> list[tuple[int, float]]:
    return [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in accumulator(logdir).Tensors(tag)]


def checkpoint_weights(prefix: str) -> list[Any]:
    fresh = model()
    tf.train.Checkpoint(model=fresh).read(prefix).expect_partial()
    return list(fresh.get_weights())


@KERAS_NP_ARRAY
@pytest.mark.parametrize("min_delta", [0.0, 0.005])
def test_restore_best_restores_what_keras_early_stopping_restores(tmp_path: Path, min_delta: float) -> None:
    settings: Stopping = {"patience": 3, "min_delta": min_delta}
    keras_stopping = keras.callbacks.EarlyStopping(monitor="val_loss", restore_best_weights=True, **settings)
    theirs = model()
    keras_board = keras.callbacks.TensorBoard(str(tmp_path / "keras"))
    history = theirs.fit(*TRAIN, epochs=40, validation_data=VAL, callbacks=[keras_stopping, keras_board], **FIT)
    val_loss = history.history["val_loss"]
    assert len(val_loss) < 40  # Keras stopped early: the comparison means something
    if min_delta:
        # The rule's best is not the lowest value: restoring "the lowest" would differ.
        assert int(np.argmin(val_loss)) != keras_stopping.best_epoch

    bus = EventBus()
    stopping = bus.attach(EarlyStoppingSink("eval/loss", restore_best=True, **settings))
    bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=STEPS_PER_EPOCH))
    bus.attach(TensorBoardSink(tmp_path / "ours"))
    recorded = EpochWeights()
    ours = model()
    with bus:
        mine = ours.fit(*TRAIN, epochs=40, validation_data=VAL, callbacks=[EventBusCallback(bus), recorded], **FIT)

    epochs = len(val_loss)
    assert len(mine.history["val_loss"]) == epochs  # the same stop
    assert stopping.state.best_step == (keras_stopping.best_epoch + 1) * STEPS_PER_EPOCH
    assert same(ours.get_weights(), theirs.get_weights())  # the same weights restored
    assert same(ours.get_weights(), recorded.weights[keras_stopping.best_epoch])
    # Weights only: the optimizer and the step are those training ended with, as Keras's.
    assert int(ours.optimizer.iterations.numpy()) == int(theirs.optimizer.iterations.numpy()) == epochs * 4
    assert same([v.numpy() for v in ours.optimizer.variables], [v.numpy() for v in theirs.optimizer.variables])
    # The checkpoint pointer stays at the last step, and that checkpoint holds the last weights.
    latest = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
    assert latest is not None
    assert latest.endswith(f"model.ckpt-{epochs * STEPS_PER_EPOCH}")
    assert same(checkpoint_weights(latest), recorded.weights[epochs - 1])
    # TensorBoard: the validation losses Keras's callback logs by iteration are ours, step by step.
    theirs_tb = tensors(tmp_path / "keras" / "validation", "evaluation_loss_vs_iterations")
    ours_tb = [(e.step, e.value) for e in accumulator(tmp_path / "ours" / "eval").Scalars("loss")]
    assert [s for s, _ in ours_tb] == [s for s, _ in theirs_tb] == [STEPS_PER_EPOCH * (i + 1) for i in range(epochs)]
    assert [v for _, v in ours_tb] == pytest.approx([v for _, v in theirs_tb], rel=1e-5)


@KERAS_NP_ARRAY
def test_a_resumed_fit_starts_at_the_epoch_backup_and_restore_starts_at(tmp_path: Path) -> None:
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    with pytest.raises(RuntimeError, match="interrupted at epoch 3"):
        model().fit(*TRAIN, epochs=6, callbacks=[backup, InterruptAt(3)], **FIT)
    theirs = model().fit(*TRAIN, epochs=6, callbacks=[backup], **FIT)

    def run(*extra: Any) -> Any:
        bus = EventBus()
        bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=STEPS_PER_EPOCH))
        m = model()
        with bus:
            history = m.fit(*TRAIN, epochs=6, callbacks=[EventBusCallback(bus, restore=True), *extra], **FIT)
        return m, history

    with pytest.raises(RuntimeError, match="interrupted at epoch 3"):
        run(InterruptAt(3))
    resumed, ours = run()  # no initial_epoch
    assert ours.epoch == theirs.epoch == [3, 4, 5]
    assert int(resumed.optimizer.iterations.numpy()) == 6 * STEPS_PER_EPOCH
    assert resumed._initial_epoch is None  # a later fit of this model starts where it is told


def test_a_resumed_fit_whose_patience_ran_out_trains_no_further_epoch_and_restores_the_best(tmp_path: Path) -> None:
    def run() -> tuple[Any, Any, EventBus]:
        bus = EventBus()
        bus.attach(EarlyStoppingSink("eval/loss", patience=3, restore_best=True))
        bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=STEPS_PER_EPOCH))
        m = model()
        with bus:
            callback = EventBusCallback(bus, restore=True)
            history = m.fit(*TRAIN, epochs=40, validation_data=VAL, callbacks=[callback], **FIT)
        return m, history, bus

    first, history, bus = run()
    stopped = len(history.epoch) * STEPS_PER_EPOCH
    assert stopped < 40 * STEPS_PER_EPOCH
    assert bus.stop_reason is not None
    again, history, bus = run()
    assert history.epoch == []  # not one more epoch, not one batch
    assert int(again.optimizer.iterations.numpy()) == stopped
    assert bus.stop_reason is not None
    assert bus.stop_reason.endswith("(before the restart)")
    # The best epoch came before the restart: its weights are read from its checkpoint.
    assert same(again.get_weights(), first.get_weights())
    assert not same(again.get_weights(), checkpoint_weights(tf.train.latest_checkpoint(str(tmp_path / "ckpt"))))
    assert os.path.basename(tf.train.latest_checkpoint(str(tmp_path / "ckpt"))) == f"model.ckpt-{stopped}"


@KERAS_NP_ARRAY
def test_the_keras_model_graph_is_what_keras_tensorboard_writes(tmp_path: Path) -> None:
    """Keras's ``TensorBoard(write_graph=True)`` and TensorBoardSink on the same fit: TensorBoard's
    reader finds the same model configuration for the graph tab in both (Keras 3 on TensorFlow
    writes no op graph of ``train_function``, a plain Python function)."""

    def keras_configs(logdir: Path) -> list[tuple[int, str]]:
        reader = accumulator(logdir)
        assert reader.PluginTagToContent("graph_keras_model") == {"keras": b"1"}
        return [(e.step, e.tensor_proto.string_val[0].decode()) for e in reader.Tensors("keras")]

    bus = EventBus()
    bus.attach(TensorBoardSink(tmp_path / "ours"))
    m = model()
    keras_board = keras.callbacks.TensorBoard(str(tmp_path / "keras"), write_graph=True)
    with bus:
        m.fit(*TRAIN, epochs=2, callbacks=[keras_board, EventBusCallback(bus)], **FIT)
        m.fit(*TRAIN, epochs=3, initial_epoch=2, callbacks=[EventBusCallback(bus)], **FIT)  # a second session
    theirs, ours = keras_configs(tmp_path / "keras" / "train"), keras_configs(tmp_path / "ours" / "train")
    assert ours == theirs
    assert len(ours) == 1  # once per event file
    assert '"class_name": "Sequential"' in ours[0][1]


@pytest.mark.parametrize("on_nan", ["stop", "raise"])
def test_nan_guard_stops_a_fit_where_terminate_on_nan_does(on_nan: str) -> None:
    """Issue 38, item 4: ``TerminateOnNaN`` ends ``fit`` normally after the batch whose loss is not
    finite; ``NanGuardSink("loss", on_nan="stop")`` ends it at the same batch, with the same history
    and weights; the default, ``on_nan="raise"``, raises ``NonFiniteError`` there instead."""
    from hookbus.sinks import NanGuardSink, NonFiniteError

    def diverging() -> Any:  # a rate so large that the second batch's loss is NaN
        return classifier(keras.optimizers.SGD(1e30))

    theirs = diverging()
    theirs.fit(*TRAIN, epochs=3, shuffle=False, callbacks=[keras.callbacks.TerminateOnNaN()], **FIT)
    bus = EventBus()
    bus.attach(NanGuardSink("loss", on_nan=on_nan))
    ours = diverging()
    with bus:
        if on_nan == "raise":
            with pytest.raises(NonFiniteError, match="loss is non-finite"):
                ours.fit(*TRAIN, epochs=3, shuffle=False, callbacks=[EventBusCallback(bus)], **FIT)
        else:
            ours.fit(*TRAIN, epochs=3, shuffle=False, callbacks=[EventBusCallback(bus)], **FIT)
    assert int(ours.optimizer.iterations.numpy()) == int(theirs.optimizer.iterations.numpy()) == 2
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)  # NaN where Keras's are NaN
    if on_nan == "stop":
        assert ours.history.history.keys() == theirs.history.history.keys()
        for key, values in theirs.history.history.items():
            np.testing.assert_array_equal(ours.history.history[key], values)
