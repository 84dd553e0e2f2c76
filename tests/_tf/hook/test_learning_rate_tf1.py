"""The learning-rate sinks on the TF1 hook, in hookbus.train_and_evaluate's rounds: a reduction the
evaluation between two rounds decides trains from the next round's first step, on a rate variable
and on a rate tensor (hookbus's multiplier), and stays in effect in the rounds after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")

import hookbus  # noqa: E402 - after the importorskip
from hookbus.sinks import CheckpointSink, ReduceLROnPlateauSink, StopAtStepSink  # noqa: E402

ROUND = 20


def rounds(directory: Path, *, tensor: bool) -> tuple[dict[int, float], list[Any], Any]:
    """Five rounds of ROUND steps with an evaluation after each that never improves on the first;
    the rate that trained each step, the changes, and the plateau sink."""
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", [1], initializer=v1.ones_initializer())
        loss = tf.reduce_sum(tf.square(w))
        if tensor:
            rate: Any = v1.train.polynomial_decay(0.1, step, 1000, 0.01)  # a schedule: a rate tensor
        else:
            rate = v1.get_variable("learning_rate", initializer=0.1, trainable=False)
        train_op = v1.train.GradientDescentOptimizer(rate).minimize(loss, global_step=step)
        bus = hookbus.EventBus()
        plateau = bus.attach(ReduceLROnPlateauSink(monitor="eval/score", mode="max", factor=0.5, patience=1))
        bus.attach(CheckpointSink(directory, every_n_steps=ROUND, keep=2))
        bus.attach(StopAtStepSink(last_step=5 * ROUND))
        trained: dict[int, float] = {}
        bus.on("after_run", lambda e: trained.__setitem__(e.step, e.values["learning_rate"]), keys="learning_rate")
        changes: list[Any] = []
        bus.on("learning_rate_changed", changes.append)
        train = hookbus.EventBusHook(bus, fetches={"loss": loss}, train_op=train_op, learning_rate=rate)
        evaluate = hookbus.EventBusHook(bus, fetches={"score": tf.constant(1.0)}, mode="eval")
        with bus:
            hookbus.train_and_evaluate(
                bus,
                train_op=train_op,
                eval_fetches=[],
                checkpoint_dir=str(directory),
                steps_per_round=ROUND,
                train_hooks=[train],
                eval_hooks=[evaluate],
                eval_steps=1,
            )
    return trained, changes, plateau


@pytest.mark.parametrize("tensor", [False, True], ids=["rate variable", "rate tensor"])
def test_a_reduction_decided_between_rounds_trains_from_the_next_round_on(tmp_path: Path, tensor: bool) -> None:
    trained, changes, plateau = rounds(tmp_path, tensor=tensor)
    # Evaluations at 20 (the best), 40, 60, 80, 100: each after the first reduces (patience 1).
    assert [c.step for c in changes] == [40, 60, 80]  # the one at 100 has no round after it
    assert plateau.state.reductions == 4
    for s in range(1, 5 * ROUND + 1):
        halvings = max(0, (s - 1) // ROUND - 1)  # rounds 3, 4, 5 train after 1, 2, 3 reductions
        base = 0.1 if not tensor else (0.1 - 0.1 * 0.9 * (s - 1) / 1000)  # polynomial_decay to 0.01
        assert trained[s] == pytest.approx(base * 0.5**halvings, rel=1e-5), s


@pytest.mark.subprocess
def test_the_demo_with_reduce_lr_halves_the_rate_on_a_plateau_before_early_stopping_decides(tmp_path: Path) -> None:
    import csv
    import os
    import subprocess
    import sys

    argv = [sys.executable, "-m", "hookbus._cli._cli", "demo", "--logdir", str(tmp_path / "demo"), "--reduce-lr", "2"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([*argv, "--delay", "0"], capture_output=True, text=True, env=env, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "early stopping: eval/loss" in done.stdout
    with open(tmp_path / "demo" / "metrics.csv") as file:
        rows = [(int(r["step"]), float(r["learning_rate"])) for r in csv.DictReader(file)]
    reduced = [step for step, rate in rows if rate < 0.15]
    assert reduced, "the plateau never fired"
    assert all(rate == pytest.approx(0.2) for step, rate in rows if step < reduced[0])
    assert all(rate == pytest.approx(0.1) for step, rate in rows if step >= reduced[0])
    assert (reduced[0] - 1) % 200 < 10  # from the first step after an evaluation (rows every 10 steps)
