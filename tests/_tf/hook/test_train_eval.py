"""train_and_evaluate: the seed's train-then-evaluate flow stops at the evaluation the rule implies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import hookbus
from hookbus._cli._demo import build_linear_regression
from hookbus.sinks import CheckpointSink, CSVSink, EarlyStoppingSink

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1

# The "evaluation loss" of the k-th evaluation (k = step // 100): improves twice, then stalls.
SCRIPT = [5.0, 4.0, 3.0, 3.5, 3.25, 3.125, 2.0, 1.0]  # exact in float32


def _scripted_eval_loss(global_step: Any, steps_per_round: int) -> Any:
    index = tf.cast(global_step, tf.int32) // steps_per_round - 1
    return tf.gather(tf.constant(SCRIPT), tf.clip_by_value(index, 0, len(SCRIPT) - 1))


def test_training_stops_at_the_evaluation_early_stopping_implies(tf_graph: Any, tmp_path: Path) -> None:
    m = build_linear_regression()
    eval_loss = _scripted_eval_loss(m.global_step, 100)
    bus = hookbus.EventBus()
    checkpoints = str(tmp_path / "ckpt")
    bus.attach(CheckpointSink(checkpoints, every_n_secs=None, keep=3))
    # patience 2: best 3.0 at the 3rd evaluation, no improvement at the 4th and 5th -> stop at the 5th.
    stopper = bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=2))
    bus.attach(CSVSink(str(tmp_path / "metrics.csv"), every_n_steps=50))
    seen: list[tuple[int, float]] = []
    bus.on("after_run", lambda e: seen.append((e.step, e.values["eval/loss"])), keys="eval/loss")
    train = hookbus.EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
    evaluate = hookbus.EventBusHook(bus, {"loss": eval_loss}, mode="eval")
    with bus:
        rounds = hookbus.train_and_evaluate(
            bus,
            train_op=m.train_op,
            eval_fetches=eval_loss,
            checkpoint_dir=checkpoints,
            steps_per_round=100,
            train_hooks=[train],
            eval_hooks=[evaluate],
            eval_steps=3,
            max_rounds=20,
        )
    assert seen == [(100, 5.0), (200, 4.0), (300, 3.0), (400, 3.5), (500, 3.25)]
    assert rounds == 5
    assert bus.stop_reason is not None
    assert "eval/loss" in bus.stop_reason
    # Each new training session restores the checkpoint the last one ended with; the evaluation
    # made after that save must survive it (the state is not reloaded from the older file).
    assert stopper.state.best == 3.0
    assert stopper.state.wait == 2
    assert tf.train.latest_checkpoint(checkpoints).endswith("model.ckpt-500")
    with open(tmp_path / "metrics.eval.csv") as fh:  # one eval row per evaluation, none lost to the restores
        assert [line.split(",")[0] for line in fh.read().splitlines()[1:]] == ["100", "200", "300", "400", "500"]


def test_train_and_evaluate_needs_a_checkpoint_to_evaluate(tf_graph: Any, tmp_path: Path) -> None:
    m = build_linear_regression()
    bus = hookbus.EventBus()
    train = hookbus.EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
    evaluate = hookbus.EventBusHook(bus, {"loss": m.eval_loss}, mode="eval")
    with bus, pytest.raises(RuntimeError, match="attach a hookbus.sinks.CheckpointSink"):
        hookbus.train_and_evaluate(
            bus,
            train_op=m.train_op,
            eval_fetches=m.eval_loss,
            checkpoint_dir=str(tmp_path),
            steps_per_round=10,
            train_hooks=[train],
            eval_hooks=[evaluate],
            eval_steps=1,
        )


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("steps_per_round", 0, r"steps_per_round must be a positive int \(got 0\)"),
        ("eval_steps", -1, r"eval_steps must be a positive int or None \(got -1\)"),
        ("max_rounds", 1.5, r"max_rounds must be a positive int or None \(got 1.5\)"),
    ],
)
def test_bad_loop_settings_fail_before_training(argument: str, value: object, message: str) -> None:
    settings: dict[str, Any] = {"steps_per_round": 10, "eval_steps": None, "max_rounds": None, argument: value}
    with pytest.raises(ValueError, match=message):
        hookbus.train_and_evaluate(
            hookbus.EventBus(),
            train_op=None,
            eval_fetches=None,
            checkpoint_dir="unused",
            train_hooks=[],
            eval_hooks=[],
            **settings,
        )


@pytest.mark.parametrize(("evaluate_after_stop", "evaluated"), [(True, [100, 200, 250]), (False, [100, 200])])
def test_a_stop_during_training_still_evaluates_the_final_checkpoint_unless_told_not_to(
    tf_graph: Any, tmp_path: Path, evaluate_after_stop: bool, evaluated: list[int]
) -> None:
    from hookbus.sinks import StopAtStepSink

    m = build_linear_regression()
    bus = hookbus.EventBus()
    checkpoints = str(tmp_path / "ckpt")
    bus.attach(CheckpointSink(checkpoints, every_n_secs=None))
    bus.attach(StopAtStepSink(last_step=250))
    steps: list[int] = []
    bus.on("after_run", lambda e: steps.append(e.step), keys="eval/loss")
    train = hookbus.EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
    evaluate = hookbus.EventBusHook(bus, {"loss": m.eval_loss}, mode="eval")
    with bus:
        hookbus.train_and_evaluate(
            bus,
            train_op=m.train_op,
            eval_fetches=m.eval_loss,
            checkpoint_dir=checkpoints,
            steps_per_round=100,
            train_hooks=[train],
            eval_hooks=[evaluate],
            eval_steps=1,
            evaluate_after_stop=evaluate_after_stop,
        )
    assert steps == evaluated
    assert bus.stop_reason is not None
    assert "250" in bus.stop_reason


_KILL_CHILD = """
import json, os, signal, sys
import tensorflow as tf
import hookbus
from hookbus._cli._demo import build_linear_regression
from hookbus.sinks import CheckpointSink, CSVSink, EarlyStoppingSink

out, kill_at = sys.argv[1], int(sys.argv[2])
tf.compat.v1.disable_eager_execution()
SCRIPT = __SCRIPT__
with tf.Graph().as_default():
    m = build_linear_regression()
    index = tf.cast(m.global_step, tf.int32) // 100 - 1
    eval_loss = tf.gather(tf.constant(SCRIPT), tf.clip_by_value(index, 0, len(SCRIPT) - 1))
    bus = hookbus.EventBus()
    bus.attach(CheckpointSink(os.path.join(out, "ckpt"), every_n_secs=None, keep=3))
    stopper = bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=2))
    csv_sink = bus.attach(CSVSink(os.path.join(out, "metrics.csv"), every_n_steps=50))

    def die(event):  # the evaluation is published and its CSV row on disk, nothing recorded yet
        if event.mode == "eval" and event.step == kill_at:
            csv_sink.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    bus.on("after_run", die, keys="eval/loss")
    train = hookbus.EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
    evaluate = hookbus.EventBusHook(bus, {"loss": eval_loss}, mode="eval")
    with bus:
        hookbus.train_and_evaluate(
            bus, train_op=m.train_op, eval_fetches=eval_loss, checkpoint_dir=os.path.join(out, "ckpt"),
            steps_per_round=100, train_hooks=[train], eval_hooks=[evaluate], eval_steps=1, max_rounds=20,
        )
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"state": stopper.state_dict(), "stop_reason": bus.stop_reason, "step": bus.step}, f)
""".replace("__SCRIPT__", repr(SCRIPT))


def _run_child(out: Path, kill_at: int) -> int:
    import os
    import subprocess
    import sys

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", _KILL_CHILD, str(out), str(kill_at)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode in (0, -9), done.stderr[-3000:]
    return done.returncode


@pytest.mark.subprocess
def test_a_kill_during_an_evaluation_is_made_up_on_restart(tmp_path: Path) -> None:
    """SIGKILL while checkpoint 300 is evaluated (its eval row already on disk): the restart
    evaluates 300 again before training on, so the eval rows and early stopping's decision are an
    uninterrupted run's, each evaluation once."""
    import json

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir()
    killed.mkdir()
    assert _run_child(whole, kill_at=-1) == 0
    assert _run_child(killed, kill_at=300) == -9
    assert _run_child(killed, kill_at=-1) == 0

    def eval_rows(out: Path) -> list[tuple[str, str]]:
        lines = (out / "metrics.eval.csv").read_text().splitlines()[1:]
        return [(line.split(",")[0], line.split(",")[2]) for line in lines]

    assert eval_rows(killed) == eval_rows(whole)
    assert [step for step, _ in eval_rows(whole)] == ["100", "200", "300", "400", "500"]
    results = [json.loads((out / "result.json").read_text()) for out in (whole, killed)]
    assert results[0] == results[1]
    assert results[0]["step"] == 500
    assert results[0]["state"]["best"] == 3.0
    assert results[0]["state"]["wait"] == 2
