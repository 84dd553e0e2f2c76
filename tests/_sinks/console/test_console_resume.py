"""The dashboard's "best" survives a resume: it equals early stopping's restored best (issue 15).

A real resume: train and evaluate with real TensorFlow sessions, checkpoints through the barrier,
then a new bus with new sinks (what a new process has) restores from the same directory.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import hookbus
from hookbus._cli._demo import build_linear_regression
from hookbus.sinks import CheckpointSink, ConsoleSink, EarlyStoppingSink

tf = pytest.importorskip("tensorflow")

# The k-th evaluation's loss (k = step // 100): its best, 3.0 at step 300, is not the last one.
SCRIPT = [5.0, 4.0, 3.0, 3.5, 3.25, 3.125, 2.0, 1.0]  # exact in float32


def _run(tmp_path: Path, rounds: int) -> tuple[ConsoleSink, EarlyStoppingSink, list[tuple[Any, ...]]]:
    """``rounds`` rounds of train-and-evaluate on fresh sinks, resuming from ``tmp_path``'s checkpoints.

    Returns the sinks and, for each training session, what the dashboard and early stopping held
    right after the session was created (the states beside the checkpoint loaded by then).
    """
    with tf.Graph().as_default():
        m = build_linear_regression()
        index = tf.cast(m.global_step, tf.int32) // 100 - 1
        eval_loss = tf.gather(tf.constant(SCRIPT), tf.clip_by_value(index, 0, len(SCRIPT) - 1))
        bus = hookbus.EventBus()
        checkpoints = str(tmp_path / "ckpt")
        bus.attach(CheckpointSink(checkpoints, every_n_secs=None, keep=3))
        stopper = bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=5))
        console = bus.attach(ConsoleSink(Console(file=io.StringIO(), width=120), live=False, run_name="resume"))
        seen: list[tuple[Any, ...]] = []

        def after_resume(event: hookbus.Event) -> None:
            if event.mode == "train":
                rows = {row.key: row for row in console.snapshot.evals}
                row = rows.get("eval/loss")
                seen.append(
                    (event.step, row and (row.best, row.best_step), stopper.state.best, stopper.state.best_step)
                )

        bus.on("session_created", after_resume, priority=1000)  # after the checkpoint sink loaded the states
        train = hookbus.EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
        evaluate = hookbus.EventBusHook(bus, {"loss": eval_loss}, mode="eval")
        with bus:
            hookbus.train_and_evaluate(
                bus,
                train_op=m.train_op,
                eval_fetches=eval_loss,
                checkpoint_dir=checkpoints,
                steps_per_round=100,
                train_hooks=[train],
                eval_hooks=[evaluate],
                eval_steps=1,
                max_rounds=rounds,
            )
    return console, stopper, seen


def test_after_a_resume_the_dashboards_best_is_early_stoppings_restored_best(tmp_path: Path) -> None:
    console, stopper, _ = _run(tmp_path, rounds=5)  # evaluations at 100..500; best 3.0 at 300
    assert (stopper.state.best, stopper.state.best_step) == (3.0, 300)
    before = {row.key: row for row in console.snapshot.evals}["eval/loss"]
    assert (before.best, before.best_step) == (3.0, 300)

    console, stopper, seen = _run(tmp_path, rounds=1)  # new sinks: what a new process has
    step, dashboard, es_best, es_step = seen[0]
    assert step == 500  # the first session resumed from the last checkpoint
    assert (es_best, es_step) == (3.0, 300)  # early stopping's restored best
    assert dashboard == (es_best, es_step)  # the dashboard shows the same, before any new evaluation
    assert console.console is not None
    out = console.console.file
    assert isinstance(out, io.StringIO)  # the Console _run gave the sink
    text = out.getvalue()
    assert "resumed from step 500" in text
    after = {row.key: row for row in console.snapshot.evals}["eval/loss"]
    assert (after.best, after.best_step) == (stopper.state.best, stopper.state.best_step) == (3.0, 300)
    assert after.last == 3.125  # the one evaluation of this run (step 600)
