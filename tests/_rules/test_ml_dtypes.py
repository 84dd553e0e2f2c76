"""ml_dtypes (bfloat16, float8_*, ...) values convert to Python floats like every numeric dtype.

Keras mixed precision and custom loops produce bfloat16 losses. Those scalars are numpy extension
types outside ``np.number``: before, they passed through unconverted, so a bfloat16 NaN slipped
past the NaN guard, was not written to the CSV, and a checkpoint was saved from its step.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hookbus import EventBus, LoopPublisher
from hookbus.sinks import CheckpointSink, CSVSink, NanGuardSink
from hookbus.testing import ScriptedPublisher

ml_dtypes = pytest.importorskip("ml_dtypes")  # installed with TensorFlow; hookbus does not import it

FLOAT_TYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz"]


@pytest.mark.parametrize("name", [n for n in FLOAT_TYPES if hasattr(ml_dtypes, n)])
@pytest.mark.parametrize("zero_d", [False, True], ids=["scalar", "0-d array"])
def test_ml_dtypes_scalars_and_0d_arrays_become_python_floats_and_nan_is_caught(name: str, zero_d: bool) -> None:
    dtype = getattr(ml_dtypes, name)

    def value(x: float) -> Any:
        scalar = dtype(x)
        return np.asarray(scalar) if zero_d else scalar

    bus = EventBus()
    got: list[Any] = []
    bus.on("after_run", lambda e: got.append(e.values["loss"]))
    bus.attach(NanGuardSink("loss", on_nan="stop"))
    with bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": value(1.5)}, {"loss": value(math.nan)}, {"loss": value(1.0)}])
    assert type(got[0]) is float
    assert got[0] == 1.5
    assert math.isnan(got[1])
    assert bus.stop_reason == "loss is non-finite (nan) at step 2"


def test_int4_scalars_become_floats_and_arrays_stay_arrays() -> None:
    bus = EventBus()
    got: list[dict[str, Any]] = []
    bus.on("after_run", lambda e: got.append(dict(e.values)))
    with bus:
        ScriptedPublisher(bus, ["n", "w"]).run(
            [{"n": ml_dtypes.int4(3), "w": np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)}]
        )
    assert got[0]["n"] == 3.0
    assert type(got[0]["n"]) is float
    assert isinstance(got[0]["w"], np.ndarray)
    assert got[0]["w"].dtype == ml_dtypes.bfloat16


def test_a_bfloat16_nan_array_is_caught_by_the_nan_guard() -> None:
    bus = EventBus()
    bus.attach(NanGuardSink("w", on_nan="stop"))
    with bus:
        ScriptedPublisher(bus, ["w"]).run([{"w": np.array([1.0, math.nan], dtype=ml_dtypes.bfloat16)}])
    assert bus.stop_reason is not None
    assert bus.stop_reason.startswith("w is non-finite")


def test_a_bfloat16_nan_loss_in_an_eager_loop_stops_with_no_checkpoint_from_its_step(tmp_path: Path) -> None:
    """A real eager loop in bfloat16: the NaN guard stops at the NaN step, no checkpoint holds that
    step or a later one, and the CSV has every loss as a float (the NaN as ``nan``)."""
    tf = pytest.importorskip("tensorflow")
    w = tf.Variable(2.0, dtype=tf.bfloat16)
    counter = tf.Variable(0, dtype=tf.int64)
    bus = EventBus()
    bus.attach(NanGuardSink("loss", on_nan="stop"))
    bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=1, keep=10))
    bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=1))
    losses: list[Any] = []
    loop = LoopPublisher(bus, keys="loss", step_counter=counter, checkpoint=tf.train.Checkpoint(w=w, step=counter))

    @tf.function  # type: ignore[untyped-decorator]
    def train_step(poison: Any) -> Any:
        w.assign_sub(tf.constant(0.5, tf.bfloat16))
        counter.assign_add(1)
        return tf.square(w) + poison  # bfloat16 throughout

    with bus, loop:
        while not loop.should_stop and counter.numpy() < 10:
            poison = tf.constant(math.nan if counter.numpy() == 3 else 0.0, tf.bfloat16)
            loss = train_step(poison)
            assert loss.dtype == tf.bfloat16
            losses.append(loss)
            loop.step({"loss": loss})
    assert bus.stop_reason == "loss is non-finite (nan) at step 4"
    assert bus.step == 4
    saved = sorted(n for n in os.listdir(tmp_path / "ckpt") if n.endswith(".index"))
    assert saved == ["model.ckpt-1.index", "model.ckpt-2.index", "model.ckpt-3.index"]
    rows = [line.split(",") for line in (tmp_path / "m.csv").read_text().splitlines()]
    assert rows[0] == ["step", "wall_time", "loss"]
    assert [(r[0], r[2]) for r in rows[1:]] == [("1", "2.25"), ("2", "1.0"), ("3", "0.25"), ("4", "nan")]
