"""Record and replay differential test (issue 18): one real training run with CSVSink,
TensorBoardSink and EventLogSink live; ``hookbus replay`` rebuilds the CSV and TensorBoard files
from the log, and they equal the live ones (the same rows; the same scalars through TensorBoard's
EventAccumulator). Early stopping tried on the recorded run stops where it stopped live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import hookbus
from hookbus._cli._demo import build_linear_regression
from hookbus.sinks import (
    CheckpointSink,
    CSVSink,
    EarlyStoppingSink,
    EventLogSink,
    NanGuardSink,
    StopAtStepSink,
    TensorBoardSink,
)

tf = pytest.importorskip("tensorflow")

SCRIPT = [5.0, 4.0, 3.0, 3.5, 3.25, 3.125]  # the k-th evaluation's loss: patience 2 stops at the 5th


def scalars(logdir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """``tag -> [(step, value, wall_time)]`` as the legacy EventAccumulator shows them."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0}).Reload()
    return {tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, hookbus.EventBus]:
    """One real train-and-evaluate run (stopped by early stopping at step 500), recorded."""
    tmp = tmp_path_factory.mktemp("recorded")
    with tf.Graph().as_default():
        m = build_linear_regression()
        index = tf.cast(m.global_step, tf.int32) // 100 - 1
        eval_loss = tf.gather(tf.constant(SCRIPT), tf.clip_by_value(index, 0, len(SCRIPT) - 1))
        bus = hookbus.EventBus()
        checkpoints = str(tmp / "ckpt")
        bus.attach(CheckpointSink(checkpoints, every_n_secs=None, keep=3))
        bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=2))
        bus.attach(NanGuardSink("loss"))  # every step, loss only: the log holds those steps too
        bus.attach(CSVSink(tmp / "live" / "metrics.csv", every_n_steps=10))
        bus.attach(TensorBoardSink(tmp / "live" / "tb", every_n_steps=50))
        bus.attach(EventLogSink(tmp / "events.jsonl"))
        train = hookbus.EventBusHook(bus, {"loss": m.loss, "accuracy": m.accuracy}, train_op=m.train_op)
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
                max_rounds=20,
            )
    assert bus.step == 500
    return tmp, bus


def test_replayed_csv_and_tensorboard_equal_what_the_live_sinks_wrote(
    recorded: tuple[Path, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from hookbus._cli._cli import main

    tmp, _ = recorded
    log = tmp / "events.jsonl"
    found = [r for r in hookbus.read_event_log(log) if r["record"] == "step" and r["mode"] == "train"]
    assert [r["step"] for r in found if not r.get("final")] == list(range(1, 501))  # the NaN guard's: each once
    assert [r["step"] for r in found if r.get("final")] == [100, 200, 300, 400, 500]  # the at-end events
    out = tmp / "replayed"
    argv = ["replay", str(log), "--csv", str(out / "metrics.csv"), "--tensorboard", str(out / "tb")]
    assert main([*argv, "--tensorboard-every-n-steps", "50"]) == 0
    assert "replayed 500 step records" in capsys.readouterr().out
    live = tmp / "live"
    for name in ("metrics.csv", "metrics.eval.csv"):  # the same rows, wall times included
        assert (out / name).read_text() == (live / name).read_text(), name
    assert len((live / "metrics.csv").read_text().splitlines()) == 1 + 50
    assert len((live / "metrics.eval.csv").read_text().splitlines()) == 1 + 5
    # The same scalars (steps/sec and the time outside the steps included, as the training measured it),
    # steps and wall times.
    for run in ("tb/train", "tb/eval"):
        shown, replayed = scalars(live / run), scalars(out / run)
        assert shown == replayed, run
        assert shown, run
    assert {tag for tag in scalars(live / "tb" / "train")} == {"loss", "accuracy", "steps/sec", "outside_secs/step"}
    assert [s for s, _, _ in scalars(live / "tb" / "train")["loss"]] == list(range(50, 501, 50))


def test_early_stopping_tried_on_the_recorded_run(
    recorded: tuple[Path, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from hookbus._cli._cli import main

    tmp, live = recorded
    bus = hookbus.EventBus()
    bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=2))
    result = hookbus.replay(tmp / "events.jsonl", bus)
    assert (result.stopped, result.stop_step, result.stop_reason) == (True, 500, live.stop_reason)
    # patience 1: the 4th evaluation (3.5 after the best 3.0) would have stopped it at step 400.
    assert main(["replay", str(tmp / "events.jsonl"), "--early-stopping", "monitor=eval/loss,patience=1"]) == 0
    printed = capsys.readouterr().out
    assert "EarlyStoppingSink would have stopped at step 400" in printed
    assert main(["replay", str(tmp / "events.jsonl"), "--early-stopping", "monitor=eval/loss,patience=9"]) == 0
    assert "would not have stopped: the log ends at step 500" in capsys.readouterr().out


def test_replay_without_an_output_option_says_what_the_log_holds_and_what_to_ask(
    recorded: tuple[Path, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from hookbus._cli._cli import main

    tmp, _ = recorded
    log = tmp / "events.jsonl"
    steps = [r["step"] for r in hookbus.read_event_log(log) if r["record"] == "step"]
    assert main(["replay", str(log)]) == 2  # a missing argument, as argparse says it
    out, err = capsys.readouterr()
    assert out == ""
    assert f"hookbus replay: nothing asked for; {log} holds {len(steps)} step records up to step {max(steps)}" in err
    for option in ("--csv FILE", "--tensorboard DIR", "--early-stopping SPEC"):
        assert option in err


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real training (400 steps, NanGuardSink due every step) recorded twice at once: by a
    log with its own schedule (every 50 steps) and by one without (every step published)."""
    tmp = tmp_path_factory.mktemp("scheduled")
    with tf.Graph().as_default():
        m = build_linear_regression()
        bus = hookbus.EventBus()
        checkpoints = str(tmp / "ckpt")
        bus.attach(CheckpointSink(checkpoints, every_n_steps=125, every_n_secs=None, keep=5))
        bus.attach(NanGuardSink("loss"))  # every step: every step is published
        bus.attach(StopAtStepSink(last_step=400))
        bus.attach(CSVSink(tmp / "live" / "metrics.csv", every_n_steps=100))
        bus.attach(TensorBoardSink(tmp / "live" / "tb", every_n_steps=100))
        bus.attach(EventLogSink(tmp / "every50.jsonl", every_n_steps=50, name="every50"))
        bus.attach(EventLogSink(tmp / "all.jsonl", name="all"))
        hook = hookbus.EventBusHook(bus, {"loss": m.loss, "accuracy": m.accuracy}, train_op=m.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=checkpoints) as sess:
            while not sess.should_stop():
                sess.run(m.train_op)
    assert bus.step == 400
    return tmp


def test_a_log_with_its_own_schedule_records_its_steps_of_a_real_training_and_replays_them(
    scheduled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hookbus._cli._cli import main

    def records(name: str) -> list[dict[str, Any]]:
        return hookbus.read_event_log(scheduled / name)

    def train_steps(found: list[dict[str, Any]]) -> list[int]:
        return [r["step"] for r in found if r["record"] == "step" and r["mode"] == "train" and not r.get("final")]

    every50, everything = records("every50.jsonl"), records("all.jsonl")
    assert train_steps(everything) == list(range(1, 401))  # no schedule: every step published (the default)
    assert train_steps(every50) == list(range(50, 401, 50))
    by_step = {r["step"]: r for r in everything if r["record"] == "step"}
    assert all(r == by_step[r["step"]] for r in every50 if r["record"] == "step")  # the same values

    def others(found: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(r["record"], r["step"]) for r in found if r["record"] != "step"]

    assert others(every50) == others(everything)  # sessions, checkpoints, the stop, the end, the close
    assert [s for kind, s in others(every50) if kind == "checkpoint_saved"] == [125, 250, 375, 400]
    assert every50[-1] | {"wall_time": 0} == {
        "v": 1,
        "record": "close",
        "step": 400,
        "wall_time": 0,
        "ended": "finished",
    }
    assert (scheduled / "every50.jsonl").stat().st_size * 10 < (scheduled / "all.jsonl").stat().st_size

    # Replayed on the recorded schedule, the CSV and TensorBoard sinks write what they wrote live.
    out = scheduled / "replayed"
    argv = ["replay", str(scheduled / "every50.jsonl"), "--csv", str(out / "metrics.csv")]
    argv += ["--csv-every-n-steps", "100", "--tensorboard", str(out / "tb"), "--tensorboard-every-n-steps", "100"]
    assert main(argv) == 0
    assert "replayed 8 step records" in capsys.readouterr().out
    live = scheduled / "live"
    assert (out / "metrics.csv").read_text() == (live / "metrics.csv").read_text()  # wall times included
    assert len((live / "metrics.csv").read_text().splitlines()) == 1 + 4
    shown, replayed = scalars(live / "tb" / "train"), scalars(out / "tb" / "train")
    assert shown == replayed
    assert [s for s, _, _ in shown["loss"]] == [100, 200, 300, 400]
