"""The same sinks behind all three publishers give the same files.

Each publisher trains a tiny model for up to 12 steps with the same sinks: CSV every 3 steps,
TensorBoard every 4, checkpoints every 5, a stop at step 10. The steps written, the stop step and
the checkpoints must agree. Differences that come from the frameworks, not from hookbus:

- values: the hook and the loop publish each step's own loss; Keras publishes its batch logs,
  running means over the epoch so far. The tests compare steps and columns, not values.
- checkpoint files: the TF1 ``Saver`` also writes ``<prefix>.meta`` (a graph for
  ``import_meta_graph``); ``tf.train.Checkpoint`` has no graph to write.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import hookbus  # noqa: E402 - after the importorskip
from hookbus import EventBus  # noqa: E402
from hookbus._cli._demo import build_linear_regression  # noqa: E402
from hookbus.sinks import CheckpointSink, CSVSink, EarlyStoppingSink, StopAtStepSink, TensorBoardSink  # noqa: E402

MAX_STEPS = 12


def attach_sinks(bus: EventBus, directory: Path) -> None:
    bus.attach(CSVSink(directory / "metrics.csv", every_n_steps=3, flush_secs=0.05))
    bus.attach(TensorBoardSink(str(directory / "tb"), every_n_steps=4))
    bus.attach(CheckpointSink(directory / "ckpt", every_n_steps=5, every_n_secs=None))
    bus.attach(StopAtStepSink(last_step=10))


def run_hook(bus: EventBus, directory: Path) -> None:
    with tf.Graph().as_default():
        m = build_linear_regression()
        hook = hookbus.EventBusHook(bus, fetches={"loss": m.loss}, train_op=m.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(directory / "ckpt")) as sess:
            for _ in range(MAX_STEPS):
                if sess.should_stop():
                    break
                sess.run(m.train_op)


def small_model() -> Any:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])


def xy() -> tuple[Any, Any]:
    x = np.random.default_rng(0).normal(size=(4 * MAX_STEPS, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def run_keras(bus: EventBus, directory: Path) -> None:
    model = small_model()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    with bus:
        model.fit(*xy(), batch_size=4, epochs=1, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])


def run_loop(bus: EventBus, directory: Path) -> None:
    model = small_model()
    optimizer = keras.optimizers.SGD(0.05)
    x, y = xy()

    @tf.function  # type: ignore[untyped-decorator]
    def train_step(xb: Any, yb: Any) -> dict[str, Any]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb) - yb))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
        )
        return {"loss": loss}

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    loop = hookbus.LoopPublisher(bus, keys="loss", step_counter=optimizer.iterations, checkpoint=checkpoint)
    with bus, loop:
        for i in range(MAX_STEPS):
            if loop.step(train_step(x[4 * i : 4 * i + 4], y[4 * i : 4 * i + 4])):
                break


PUBLISHERS: dict[str, Callable[[EventBus, Path], None]] = {"hook": run_hook, "keras": run_keras, "loop": run_loop}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, EventBus]]:
    done = {}
    for name, run in PUBLISHERS.items():
        directory = tmp_path_factory.mktemp(name)
        bus = EventBus()
        attach_sinks(bus, directory)
        run(bus, directory)
        done[name] = (directory, bus)
    return done


@pytest.mark.parametrize("publisher", list(PUBLISHERS))
def test_csv_rows(runs: dict[str, tuple[Path, EventBus]], publisher: str) -> None:
    directory, _ = runs[publisher]
    lines = (directory / "metrics.csv").read_text().splitlines()
    assert lines[0] == "step,wall_time,loss"
    assert [line.split(",")[0] for line in lines[1:]] == ["3", "6", "9"]


@pytest.mark.parametrize("publisher", list(PUBLISHERS))
def test_tensorboard_scalars(runs: dict[str, tuple[Path, EventBus]], publisher: str) -> None:
    from tensorboard.backend.event_processing import event_accumulator

    directory, _ = runs[publisher]
    acc = event_accumulator.EventAccumulator(str(directory / "tb" / "train"), size_guidance={"scalars": 0}).Reload()
    assert [e.step for e in acc.Scalars("loss")] == [4, 8]
    assert [e.step for e in acc.Scalars("steps/sec")] == [4, 8]


@pytest.mark.parametrize("publisher", list(PUBLISHERS))
def test_stop_step(runs: dict[str, tuple[Path, EventBus]], publisher: str) -> None:
    _, bus = runs[publisher]
    assert bus.step == 10
    assert bus.stop_reason == "reached step 10 (last_step 10)"


@pytest.mark.parametrize("publisher", list(PUBLISHERS))
def test_checkpoint_files(runs: dict[str, tuple[Path, EventBus]], publisher: str) -> None:
    directory, _ = runs[publisher]
    ckpt = directory / "ckpt"
    names = {n for n in os.listdir(ckpt) if not n.endswith(".meta")}  # .meta: TF1 only (module doc)
    assert names == {
        "checkpoint",
        ".checkpoint.lock",  # one writer per directory (docs/guides/sinks/checkpoints.md "One writer per file")
        "ended.hookbus.json",  # the run's end, for an evaluator task (docs/guides/clusters.md "An evaluator task")
        *(f"model.ckpt-{s}{suffix}" for s in (5, 10) for suffix in (".index", ".data-00000-of-00001", ".hookbus.json")),
    }
    assert json.loads((ckpt / "ended.hookbus.json").read_text())["step"] == 10
    assert tf.train.latest_checkpoint(str(ckpt)) == str(ckpt / "model.ckpt-10")
    reader = tf.train.load_checkpoint(str(ckpt / "model.ckpt-5"))
    step_keys = [k for k in reader.get_variable_to_shape_map() if "global_step" in k or "iterations" in k]
    assert step_keys
    assert all(int(reader.get_tensor(k)) == 5 for k in step_keys)


@pytest.mark.parametrize("publisher", ["keras", "loop"])
def test_early_stopping_on_eval_loss_stops_at_the_same_evaluation(publisher: str) -> None:
    """Scripted eval losses behind the Keras validation and the loop's evaluate stop alike."""
    losses = [3.0, 2.0, 2.5, 2.6, 1.0]
    bus = EventBus()
    stopper = bus.attach(EarlyStoppingSink("eval/loss", patience=1))
    if publisher == "loop":
        loop = hookbus.LoopPublisher(bus, keys="loss", eval_keys="loss")
        with bus, loop:
            for i in range(20):
                loop.step({"loss": 1.0})
                if loop.global_step % 4 == 0:
                    loop.evaluate({"loss": losses[i // 4]})
                if loop.should_stop:
                    break
    else:
        model = small_model()
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
        script = iter(losses)

        class ScriptedVal(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                logs["val_loss"] = next(script)  # runs before ours: it is listed first

        with bus:
            model.fit(
                *xy(), batch_size=12, epochs=5, verbose=0, callbacks=[ScriptedVal(), hookbus.EventBusCallback(bus)]
            )
    assert stopper.stopped_at == 12
