"""One evaluation per training step (hookbus._bus._evaluated): the first evaluation of a step counts,
in every sink and in early stopping; later ones at that step are published to no one, with one
warning. A real mixed-precision loop repeats steps: ``LossScaleOptimizer`` skips non-finite steps
without advancing ``iterations``, so a loop evaluating on ``step % n == 0`` evaluates step 0 again
after each skipped step.
"""

from __future__ import annotations

import csv
import logging
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hookbus
from hookbus.sinks import CSVSink, EarlyStoppingSink, TensorBoardSink
from hookbus.sinks.console._health import health_summary
from hookbus.testing import FakeClock, ScriptedPublisher

REPEATED = "repeats one already published at that step"


def test_a_resume_point_makes_later_evaluations_count_again(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    bus = hookbus.EventBus(clock=clock)
    early = EarlyStoppingSink("eval/loss", patience=5)
    bus.attach(early)
    seen: list[tuple[int, float]] = []
    bus.on("after_run", keys="eval/loss")(lambda e: seen.append((e.step, e.values["eval/loss"])))
    train = ScriptedPublisher(bus, ["loss"])
    evaluate = ScriptedPublisher(bus, ["loss"], mode="eval")
    with caplog.at_level(logging.WARNING, logger="hookbus"), bus:
        train.begin()
        train.session(0)
        for step in (3, 3, 5):
            evaluate.evaluate({"loss": float(step)}, step=step)
        train.session(3, restored=True)  # re-created at 3 (a recoverable error): steps after 3 come again
        evaluate.evaluate({"loss": 3.5}, step=3)  # 3 is still in every output: not again
        evaluate.evaluate({"loss": 5.5}, step=5)  # 5 is regenerated
    assert seen == [(3, 3.0), (5, 5.0), (5, 5.5)]
    assert early.state.seen == 3
    assert sum(REPEATED in r.getMessage() for r in caplog.records) == 1  # once per run


tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tensorboard.backend.event_processing import event_accumulator  # noqa: E402 - after the importorskip


@pytest.fixture
def mixed_precision() -> Iterator[None]:
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _steps(path: Path) -> list[int]:
    with path.open(newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f)]


@pytest.mark.usefixtures("mixed_precision")
def test_a_mixed_precision_loop_evaluating_one_step_repeatedly_counts_it_once_everywhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.001))
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    # Targets large enough that the gradients overflow float16 at the first loss scales (32768,
    # 16384, ...): those steps are skipped and iterations stays at 0 until the scale is small enough.
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) * 16).astype("float32")

    def train_step() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.mean_squared_error(y, model(x)))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    bus = hookbus.EventBus()
    csv_sink = CSVSink(tmp_path / "m.csv", every_n_steps=1)
    bus.attach(csv_sink)
    bus.attach(TensorBoardSink(tmp_path / "tb", every_n_steps=1))
    early = EarlyStoppingSink("eval/loss", patience=2)
    bus.attach(early)
    loop = hookbus.LoopPublisher(bus, keys=["loss"], eval_keys=["loss"], step_counter=optimizer.iterations)
    evaluated: Counter[int] = Counter()
    with caplog.at_level(logging.WARNING, logger="hookbus"), bus, loop:
        # The loop as users write it: evaluate on global_step % 2 == 0 (step 0 included).
        loop.evaluate({"loss": 100.0})
        evaluated[loop.global_step] += 1
        for _ in range(12):
            loss = train_step()
            if loop.step({"loss": loss}):
                break
            if loop.global_step % 2 == 0:
                loop.evaluate({"loss": 100.0 - loop.global_step})  # improving: no early stop
                evaluated[loop.global_step] += 1
    assert evaluated[0] >= 3, f"the optimizer skipped too few steps to repeat an evaluation: {evaluated}"
    steps = sorted(evaluated)
    # Early stopping counted each step's evaluation once, and so did not stop at step 0.
    assert early.state.seen == len(steps)
    assert bus.stop_reason is None
    # CSV: one row per evaluated step.
    assert _steps(tmp_path / "m.eval.csv") == steps
    # TensorBoard, read back with TensorBoard's own reader: one point per evaluated step.
    reader = event_accumulator.EventAccumulator(str(tmp_path / "tb" / "eval"), size_guidance={"scalars": 0})
    reader.Reload()
    assert [e.step for e in reader.Scalars("loss")] == steps
    # The health line counts what was written: the train rows and one eval row per step.
    written = len(_steps(tmp_path / "m.csv")) + len(steps)
    stats = bus.stats()[csv_sink.name].writer
    assert stats is not None
    assert stats.rows == written
    # The sink's one mention carries its count, whether it stands alone ("CSVSink 13 rows") or is
    # also the slowest sink ("most: CSVSink 0.4 ms (13 rows)"), which depends on the machine.
    assert re.search(rf"\b{re.escape(csv_sink.name)}\b[^|]*\b{written:,} rows", health_summary(bus.stats()))
    warnings = [r.getMessage() for r in caplog.records if REPEATED in r.getMessage()]
    assert len(warnings) == 1
    assert "eval/loss at step 0" in warnings[0]
