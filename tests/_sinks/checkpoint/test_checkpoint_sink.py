"""CheckpointSink with real TensorFlow: the barrier, resume, retention, failures, NaN, best."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")

import hookbus  # noqa: E402 - after the importorskip
from hookbus import EventBus  # noqa: E402
from hookbus._cli._demo import build_linear_regression  # noqa: E402
from hookbus._tf._checkpoint_tf1 import SaverBackend  # noqa: E402
from hookbus.sink_api import CheckpointSaved, Sink  # noqa: E402
from hookbus.sinks import CheckpointSink, EarlyStoppingSink, NanGuardSink, StopAtStepSink  # noqa: E402


class Recorder(Sink):
    """A writer stand-in: records flushes and has state, like CSVSink."""

    def __init__(self, log: list[str], name: str = "Recorder") -> None:
        super().__init__(keys="loss", every_n_steps=1, name=name)
        self.log = log
        self.rows = 0

    def on_after_run(self, event: Any) -> None:
        self.rows += 1
        self.log.append(f"row {event.step}")

    def flush(self) -> None:
        self.log.append(f"flush {self.rows}")

    def state_dict(self) -> dict[str, Any]:
        return {"rows": self.rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows = state["rows"]


def train(
    directory: str,
    sinks: list[Sink],
    *,
    last_step: int,
    fetches: Callable[[Any], dict[str, Any]] | None = None,
) -> tuple[EventBus, list[CheckpointSaved], int]:
    """One process's worth of training on the seed model: a fresh graph, bus and session."""
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = EventBus()
        saved: list[CheckpointSaved] = []
        bus.on("checkpoint_saved", saved.append)
        for sink in [*sinks, StopAtStepSink(last_step=last_step)]:
            bus.attach(sink)
        keys = fetches(model) if fetches is not None else {"loss": model.loss}
        # One step per run, declared: the scores some tests fetch are handed out one per fetch,
        # and a hook that has to learn the increment fetches every step rule's keys on run 1.
        hook = hookbus.EventBusHook(bus, keys, train_op=model.train_op, steps_per_run=1)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=directory) as session:
            while not session.should_stop():
                session.run(model.train_op)
    return bus, saved, bus.step


def restored_step(directory: str) -> int:
    """The step a new session restores from ``directory``."""
    with tf.Graph().as_default():
        model = build_linear_regression()
        with hookbus.monitored_training_session(checkpoint_dir=directory) as session:
            return int(session.run(model.global_step))


def steps_on_disk(directory: str) -> list[int]:
    return sorted(int(n.split("-")[-1].split(".")[0]) for n in os.listdir(directory) if n.endswith(".index"))


def test_saves_on_schedule_and_at_the_end_behind_the_barrier(tmp_path: Any) -> None:
    d = str(tmp_path / "ckpt")
    log: list[str] = []
    sink = CheckpointSink(d, every_n_steps=4, every_n_secs=None, keep=10)
    _, saved, step = train(d, [sink, Recorder(log)], last_step=10)
    assert step == 10
    assert [(os.path.basename(s.path), s.step) for s in saved] == [
        ("model.ckpt-4", 4),
        ("model.ckpt-8", 8),
        ("model.ckpt-10", 10),
    ]
    assert tf.train.latest_checkpoint(d) == os.path.join(d, "model.ckpt-10")
    # The writer received step 4 and was flushed with it before the checkpoint of step 4.
    assert log[log.index("row 4") + 1] == "flush 4"
    with open(os.path.join(d, "model.ckpt-8.hookbus.json")) as file:
        assert json.load(file) == {"step": 8, "value": None, "sinks": {"Recorder": {"rows": 8}}}


def test_resume_keeps_keep_across_processes_and_restores_sink_state(tmp_path: Any) -> None:
    d = str(tmp_path / "ckpt")
    first = EarlyStoppingSink("loss", patience=1000, every_n_steps=3)
    train(d, [CheckpointSink(d, every_n_steps=5, every_n_secs=None, keep=2), first], last_step=12)
    assert steps_on_disk(d) == [10, 12]
    seen_at_12 = first.state.seen
    log: list[str] = []
    recorder = Recorder(log)
    second = EarlyStoppingSink("loss", patience=1000, every_n_steps=3)
    sink = CheckpointSink(d, every_n_steps=5, every_n_secs=None, keep=2)
    _, saved, step = train(d, [sink, second, recorder], last_step=21)
    assert step == 21
    assert log[0] == "row 13"  # resumed at 12: the next event is 13
    assert [s.step for s in saved] == [15, 20, 21]
    assert steps_on_disk(d) == [20, 21]  # the first process's checkpoints were pruned too
    assert second.state.seen == seen_at_12 + 3  # restored, then evaluations at 15, 18, 21
    assert restored_step(d) == 21


def test_a_save_failing_halfway_leaves_the_previous_checkpoint_restorable(tmp_path: Any, monkeypatch: Any) -> None:
    d = str(tmp_path / "ckpt")
    original = SaverBackend.save

    def failing(self: SaverBackend, path: str) -> str:
        if path.endswith("-6"):
            original(self, path)  # the files are written ... and then the disk fails
            raise OSError("disk full")
        return original(self, path)

    monkeypatch.setattr(SaverBackend, "save", failing)
    with pytest.raises(OSError, match="disk full"):
        train(d, [CheckpointSink(d, every_n_steps=3, every_n_secs=None)], last_step=10)
    assert tf.train.latest_checkpoint(d) == os.path.join(d, "model.ckpt-3")
    assert steps_on_disk(d) == [3]
    assert not os.path.exists(os.path.join(d, "model.ckpt-6.hookbus.json"))
    assert restored_step(d) == 3


def test_a_failing_state_file_write_leaves_the_previous_checkpoint(tmp_path: Any, monkeypatch: Any) -> None:
    d = str(tmp_path / "ckpt")
    from hookbus._tf import _checkpoint_tf1 as _checkpoint

    original = _checkpoint.TensorFlowStore.write_state

    def failing(store: _checkpoint.TensorFlowStore, path: str, data: dict[str, Any]) -> None:
        if data["step"] == 6:
            raise OSError("no space left")
        original(store, path, data)

    monkeypatch.setattr(_checkpoint.TensorFlowStore, "write_state", failing)
    with pytest.raises(OSError, match="no space left"):
        train(d, [CheckpointSink(d, every_n_steps=3, every_n_secs=None)], last_step=10)
    assert restored_step(d) == 3


def test_no_checkpoint_from_a_nonfinite_step(tmp_path: Any) -> None:
    d = str(tmp_path / "ckpt")

    def fetches(model: Any) -> dict[str, Any]:
        # NaN from step 7 on: log of a negative number.
        step = tf.cast(model.global_step, tf.float32)
        return {"loss": model.loss, "health": tf.math.log(6.5 - step)}

    guard = NanGuardSink(keys="health", on_nan="stop")
    sink = CheckpointSink(d, every_n_steps=2, every_n_secs=None)
    bus, saved, _ = train(d, [sink, guard], last_step=30, fetches=fetches)
    assert guard.nonfinite_step is not None
    assert guard.nonfinite_step <= 8
    assert bus.stop_reason is not None
    assert "health is non-finite" in bus.stop_reason
    assert saved
    assert all(s.step < guard.nonfinite_step for s in saved)
    assert max(steps_on_disk(d)) < guard.nonfinite_step


def test_keep_best_ranks_checkpoints_and_leaves_the_pointer_at_the_last_step(tmp_path: Any) -> None:
    d = str(tmp_path / "ckpt")
    values = iter([5.0, 3.0, 4.0, 1.0, 2.0, 6.0, 7.0, 8.0])

    sinks: list[Sink] = [
        CheckpointSink(d, every_n_steps=2, every_n_secs=None, keep=2, keep_best=2, monitor="score", mode="min"),
        EarlyStoppingSink("score", mode="min", patience=2, every_n_steps=2),
    ]

    def fetches(model: Any) -> dict[str, Any]:
        return {"loss": model.loss, "score": tf.py_function(lambda: next(values), [], tf.float32)}

    bus, saved, _ = train(d, sinks, last_step=100, fetches=fetches)
    # Scores at steps 2,4,6,8,10,12: best 1.0 @ 8, then 2.0, 6.0, 7.0 -> stop at 12 (patience 2).
    assert bus.stop_reason is not None
    assert "did not improve on 1 (step 8)" in bus.stop_reason
    best = sorted(os.listdir(os.path.join(d, "best")))
    assert "model.ckpt-8.index" in best
    assert "model.ckpt-10.index" in best
    assert "model.ckpt-4.index" not in best
    assert tf.train.latest_checkpoint(os.path.join(d, "best")) == os.path.join(d, "best", "model.ckpt-8")
    # The pointer of the directory itself never goes back: a resume continues at the stop.
    assert tf.train.latest_checkpoint(d) == os.path.join(d, "model.ckpt-12")
    assert restored_step(d) == 12
    assert any(s.path.endswith(os.path.join("best", "model.ckpt-8")) and s.value == 1.0 for s in saved)


def test_a_resume_after_an_early_stop_runs_no_step(tmp_path: Any) -> None:
    """Early stopping's decision is saved with the checkpoint of its step; a restart from that
    checkpoint stops again as its session begins, before a training step."""
    d = str(tmp_path / "ckpt")
    scores = iter([5.0, 3.0, 4.0, 4.5] + [0.0] * 10)

    def fetches(model: Any) -> dict[str, Any]:
        return {"loss": model.loss, "score": tf.py_function(lambda: next(scores), [], tf.float32)}

    def sinks() -> list[Sink]:
        return [
            CheckpointSink(d, every_n_steps=2, every_n_secs=None),
            EarlyStoppingSink("score", mode="min", patience=2, every_n_steps=2),
        ]

    bus, _, step = train(d, sinks(), last_step=100, fetches=fetches)
    assert step == 8  # 3.0 at step 4 is the best; 4.0 and 4.5 use up patience 2
    assert restored_step(d) == 8
    bus, _, step = train(d, sinks(), last_step=100, fetches=fetches)
    assert step == 8  # not one step trained
    assert (bus.stop_reason or "").endswith("(before the restart)")
    assert restored_step(d) == 8


def test_bad_settings_fail_at_construction_or_begin(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"keep must be a positive int \(got 0\)"):
        CheckpointSink(tmp_path, keep=0)
    with pytest.raises(ValueError, match=r"keep_best=1 needs monitor"):
        CheckpointSink(tmp_path, keep_best=1)
    with pytest.raises(ValueError, match=r"mode must be 'min', 'max' or 'auto' \(got 'up'\)"):
        CheckpointSink(tmp_path, keep_best=1, monitor="loss", mode="up")
    d = str(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="two sinks with state are named 'Recorder'"):
        train(d, [CheckpointSink(d), Recorder([]), Recorder([])], last_step=3)


def test_a_stop_from_another_thread_is_acted_on_by_the_training_thread(tmp_path: Any) -> None:
    """A watchdog thread asks to stop mid-run: the training thread publishes the request, stops
    at its next step and saves the final checkpoint there, at the step training ended on."""
    d = str(tmp_path / "ckpt")
    trainer = threading.get_ident()
    asked = threading.Event()
    steps: list[int] = []
    stops: list[tuple[Any, int]] = []
    saved: list[tuple[CheckpointSaved, int]] = []
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = EventBus()
        bus.attach(CheckpointSink(d, every_n_steps=None, every_n_secs=None))  # saves at the stop only

        @bus.on("after_run")
        def count(event: Any) -> None:
            steps.append(event.step)
            if event.step == 50:
                asked.set()

        bus.on("stop_requested", lambda request: stops.append((request, threading.get_ident())))
        bus.on("checkpoint_saved", lambda event: saved.append((event, threading.get_ident())))

        def watchdog() -> None:
            if asked.wait(120):
                bus.request_stop("watchdog: too slow")

        thread = threading.Thread(target=watchdog, name="watchdog")
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        thread.start()
        try:
            with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=d) as session:
                while not session.should_stop() and len(steps) < 100_000:
                    session.run(model.train_op)
        finally:
            asked.set()
            thread.join()
    assert bus.stop_reason == "watchdog: too slow"
    assert len(stops) == 1, stops
    request, stop_thread = stops[0]
    assert (request.reason, request.source, stop_thread) == ("watchdog: too slow", "thread watchdog", trainer)
    assert steps[-1] == bus.step == request.step > 50  # stopped right after the step that saw the request
    assert [thread_id for _, thread_id in saved] == [trainer]
    assert saved[0][0].step == bus.step == restored_step(d)
    assert steps_on_disk(d) == [bus.step]


class Quarantine(Sink):
    """A user's control sink: refuses checkpoints of odd steps, through the Sink interface only."""

    controls_training = True

    def checkpoint_veto(self, step: int) -> str | None:
        return f"step {step} is odd" if step % 2 else None


def test_a_control_sink_vetoes_saves_through_the_interface(tmp_path: Any) -> None:
    d = str(tmp_path / "ckpt")
    sink = CheckpointSink(d, every_n_steps=3, every_n_secs=None)
    _, saved, step = train(d, [sink, Quarantine()], last_step=12)
    assert [s.step for s in saved] == [6, 12]  # 3 and 9 were vetoed; the end save is 12
    assert steps_on_disk(d) == [6, 12]
    assert step == 12


def test_only_control_sinks_may_veto() -> None:
    class Observer(Sink):
        def checkpoint_veto(self, step: int) -> str | None:
            return "no"

    with pytest.raises(TypeError, match="overrides checkpoint_veto\\(\\) but does not control training"):
        EventBus().attach(Observer())


def test_schedule_arguments_replace_the_default_schedule(tmp_path: Any) -> None:
    from hookbus.sinks import CSVSink, TensorBoardSink

    assert CSVSink(tmp_path / "m.csv").schedule == hookbus.sink_api.Schedule(every_n_steps=10)
    assert CSVSink(tmp_path / "m.csv", every_n_secs=3600).schedule == hookbus.sink_api.Schedule(every_n_secs=3600)
    assert TensorBoardSink(tmp_path / "tb", every_n_secs=60).schedule == hookbus.sink_api.Schedule(every_n_secs=60)
    step_only = CheckpointSink(tmp_path / "c", every_n_steps=500).schedule
    assert (step_only.every_n_steps, step_only.every_n_secs) == (500, None)
    default = CheckpointSink(tmp_path / "c").schedule
    assert (default.every_n_secs, default.secs_from_session_start) == (600, True)


def test_a_checkpoint_timer_counts_from_the_session_start(tmp_path: Any) -> None:
    """Neither a fresh start nor a resume saves at its first step just because a timer began:
    every_n_steps=5 saves at 5, 10 and the end; the default 600 s timer saves only at the end."""
    d = str(tmp_path / "ckpt")
    _, saved, _ = train(d, [CheckpointSink(d, every_n_steps=5)], last_step=12)
    assert [s.step for s in saved] == [5, 10, 12]
    _, resumed, _ = train(d, [CheckpointSink(d, every_n_steps=5)], last_step=17)
    assert [s.step for s in resumed] == [15, 17]
    other = str(tmp_path / "other")
    _, by_time, _ = train(other, [CheckpointSink(other)], last_step=8)
    assert [s.step for s in by_time] == [8]
    assert steps_on_disk(other) == [8]
