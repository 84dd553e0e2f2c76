"""``hookbus.from_hooks``: a ``basic_session_run_hooks`` list and its conversion on the same training.

Each test trains the same seeded graph twice under ``MonitoredTrainingSession``: once with
TensorFlow's hooks, once with what ``from_hooks`` made of the same list (a fresh graph, fresh
directories), and compares what the next tool reads: the checkpoint pointer
(``tf.train.get_checkpoint_state``, ``tf.train.latest_checkpoint``) and the restored variables,
the listeners' calls, the summaries through TensorBoard's ``EventAccumulator``, the log records.
The cases follow TensorFlow's own tests of these hooks (``basic_session_run_hooks_test.py``:
``CheckpointSaverHookTest.test_listener_with_monitored_session``, ``test_save_steps_saves_periodically``,
``SummarySaverHookTest.test_save_steps``, ``StepCounterHookTest``, ``LoggingTensorHookTest.test_print_every_n_steps``,
``NanTensorHookTest.test_nan_loss_raises`` / ``test_nan_loss_doesnt_raise``, ``StopAtStepTest``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

training_util = pytest.importorskip("tensorflow.python.training.training_util")  # the Estimator's step read

import hookbus  # noqa: E402 - after the importorskip

LAST_STEP = 12


class Listener(v1.train.CheckpointSaverListener):  # type: ignore[misc,name-defined]
    """Records its calls with the step, and what the pointer names at ``after_save``."""

    def __init__(self, directory: str, stop_at: int | None = None) -> None:
        self.calls: list[tuple[str, int | None]] = []
        self.latest_at_after_save: list[str | None] = []
        self.directory = directory
        self.stop_at = stop_at

    def begin(self) -> None:
        self.calls.append(("begin", None))

    def before_save(self, session: Any, global_step_value: int) -> None:
        assert session is not None
        self.calls.append(("before_save", int(global_step_value)))

    def after_save(self, session: Any, global_step_value: int) -> bool:
        self.calls.append(("after_save", int(global_step_value)))
        latest = tf.train.latest_checkpoint(self.directory)
        self.latest_at_after_save.append(None if latest is None else os.path.basename(latest))
        return self.stop_at is not None and global_step_value >= self.stop_at

    def end(self, session: Any, global_step_value: int) -> None:
        self.calls.append(("end", int(global_step_value)))


class Graph:
    """A seeded linear regression: ``w``, ``loss``, a merged summary, the train op.

    What the hooks fetch is computed from the one read of ``w`` the gradient uses, so it is the
    value before the step's update in either list (a second read of ``w`` in the same run races
    the update: its value depends on the order the runtime picks).
    """

    def __init__(self, nan_from: int | None = None) -> None:
        self.graph = tf.Graph()
        with self.graph.as_default():
            v1.set_random_seed(7)
            self.step = v1.train.get_or_create_global_step()
            x = tf.constant(np.linspace(-1.0, 1.0, 8, dtype=np.float32))
            y = 3.0 * x + 0.5
            self.w = v1.get_variable("w", [], initializer=v1.random_normal_initializer(seed=3))
            b = v1.get_variable("b", [], initializer=v1.zeros_initializer())
            # The hooks' read of the global step (the one they fetch), ordered before the model as
            # the Estimator ordered it: their steps are then the steps before each run, never the
            # new value by chance (TensorFlow's hooks count on it; hookbus reads after the train op).
            with tf.control_dependencies([training_util._get_or_create_global_step_read()]):
                residual = self.w * x + b - y  # one read of w: what the gradient, the loss and the rest see
            loss = tf.reduce_mean(tf.square(residual))
            self.worst = tf.reduce_max(tf.abs(residual), name="worst")
            if nan_from is not None:  # the loss of step nan_from and after is NaN
                loss = tf.where(self.step >= nan_from - 1, tf.constant(np.nan, tf.float32), loss)
            self.loss = tf.identity(loss, name="loss")
            v1.summary.scalar("loss", self.loss)
            v1.summary.scalar("worst", self.worst)
            self.summary = v1.summary.merge_all()
            self.train_op = v1.train.GradientDescentOptimizer(0.1).minimize(
                tf.where(tf.math.is_nan(self.loss), 0.0, self.loss), global_step=self.step
            )
            with tf.control_dependencies([self.train_op]):  # the step after the train op, exactly
                self.step_after = tf.identity(self.step.read_value())


def train(graph: Graph, hooks: list[Any], *, converted: bool) -> int:
    """Train until a hook stops; the last global step."""
    with graph.graph.as_default():
        if converted:
            session = hookbus.monitored_training_session(hooks=hooks)
        else:
            session = v1.train.MonitoredTrainingSession(
                hooks=hooks, save_summaries_steps=None, save_checkpoint_secs=None, log_step_count_steps=None
            )
        with session as sess:
            step = 0
            while not sess.should_stop():
                _, step = sess.run([graph.train_op, graph.step_after])
    return int(step)


def hook_list(graph: Graph, root: Path, listener: Listener) -> list[Any]:
    """TensorFlow's hooks, made in ``graph``, writing under ``root``."""
    with graph.graph.as_default():
        saver = v1.train.Saver(max_to_keep=2)
        return [
            v1.train.LoggingTensorHook({"loss": graph.loss, "worst": graph.worst}, every_n_iter=5),
            v1.train.CheckpointSaverHook(str(root / "ckpt"), save_steps=4, saver=saver, listeners=[listener]),
            v1.train.SummarySaverHook(save_steps=5, output_dir=str(root / "tb"), summary_op=graph.summary),
            v1.train.StepCounterHook(every_n_steps=5, output_dir=str(root / "tb")),
            v1.train.NanTensorHook(graph.loss),
            v1.train.StopAtStepHook(last_step=LAST_STEP),
        ]


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def logged_lines(records: list[logging.LogRecord]) -> list[str]:
    """LoggingTensorHook's lines, the seconds between lines (the machine's) cut off."""
    lines = [r.getMessage() for r in records if r.getMessage().startswith("loss = ")]
    return [re.sub(r" \(\d+\.\d{3} sec\)$", " (_ sec)", line) for line in lines]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same training with TensorFlow's hooks and with their conversion, each in its own root."""
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(logging.INFO)
    out: dict[str, Any] = {}
    try:
        for name in ("hooks", "converted"):
            root = tmp_path_factory.mktemp(name)
            graph = Graph()
            listener = Listener(str(root / "ckpt"))
            hooks = hook_list(graph, root, listener)
            lines: list[str] = []
            if name == "converted":
                with graph.graph.as_default():
                    hooks = hookbus.from_hooks(hooks, train_op=graph.train_op, report=lines.append)
            captured = Captured()
            logger.addHandler(captured)
            try:
                step = train(graph, hooks, converted=name == "converted")
            finally:
                logger.removeHandler(captured)
            out[name] = {
                "root": root,
                "listener": listener,
                "step": step,
                "records": captured.records,
                "report": lines,
                "hooks": hooks,
            }
    finally:
        logger.setLevel(level)
    return out


def test_one_event_bus_hook_and_one_line(runs: dict[str, Any]) -> None:
    hooks = runs["converted"]["hooks"]
    assert len(hooks) == 1
    assert isinstance(hooks[0], hookbus.EventBusHook)
    assert runs["converted"]["report"] == [
        "hookbus.from_hooks: converted LoggingTensorHook, CheckpointSaverHook, SummarySaverHook, "
        "StepCounterHook, NanTensorHook, StopAtStepHook into one EventBusHook"
    ]


def test_stop_at_step_ends_at_the_same_global_step(runs: dict[str, Any]) -> None:
    assert runs["hooks"]["step"] == runs["converted"]["step"] == LAST_STEP


def _state(root: Path) -> tuple[str, list[str]]:
    state = tf.train.get_checkpoint_state(str(root / "ckpt"))
    assert state is not None
    return os.path.basename(state.model_checkpoint_path), [
        os.path.basename(p) for p in state.all_model_checkpoint_paths
    ]


def test_checkpoints_the_same_pointer_files_and_values(runs: dict[str, Any]) -> None:
    hooks, converted = runs["hooks"]["root"], runs["converted"]["root"]
    assert _state(hooks) == _state(converted) == ("model.ckpt-12", ["model.ckpt-8", "model.ckpt-12"])
    latest = [tf.train.latest_checkpoint(str(r / "ckpt")) for r in (hooks, converted)]
    assert [os.path.basename(p) for p in latest] == ["model.ckpt-12", "model.ckpt-12"]
    for name in ("w", "b", "global_step"):
        assert tf.train.load_variable(latest[0], name) == tf.train.load_variable(latest[1], name)
    for root in (hooks, converted):  # save_graph_def: the graph, and a meta graph per kept checkpoint
        assert (root / "ckpt" / "graph.pbtxt").is_file()
        assert (root / "ckpt" / "model.ckpt-12.meta").is_file()
        assert not (root / "ckpt" / "model.ckpt-4.index").exists()  # beyond max_to_keep=2
    # The same checkpoint files; beside each, what hookbus adds: its sinks' states (the barrier's).
    kept = {p.name for p in (converted / "ckpt").glob("model.ckpt-*") if not p.name.endswith(".hookbus.json")}
    assert kept == {p.name for p in (hooks / "ckpt").glob("model.ckpt-*")}
    assert {p.name for p in (converted / "ckpt").glob("*.hookbus.json")} == {
        "model.ckpt-8.hookbus.json",
        "model.ckpt-12.hookbus.json",
    }


def test_listeners_are_called_as_the_hook_calls_them(runs: dict[str, Any]) -> None:
    original, converted = runs["hooks"]["listener"], runs["converted"]["listener"]
    assert original.calls[:3] == [("begin", None), ("before_save", 0), ("after_save", 0)]
    # The one difference: no checkpoint of the step a session starts at (step 0, the untrained model).
    assert converted.calls == [c for c in original.calls if c[1] != 0]
    assert converted.calls[-1] == ("end", LAST_STEP)
    # At after_save the pointer already names the checkpoint, as after Saver.save.
    assert converted.latest_at_after_save == ["model.ckpt-4", "model.ckpt-8", "model.ckpt-12"]
    assert original.latest_at_after_save[1:] == converted.latest_at_after_save


def _accumulated(root: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(root / "tb"))
    accumulator.Reload()
    return accumulator


def test_summaries_the_same_tags_steps_and_values_in_the_same_directory(runs: dict[str, Any]) -> None:
    hooks, converted = (_accumulated(runs[n]["root"]) for n in ("hooks", "converted"))
    tags = sorted(hooks.Tags()["scalars"])
    assert tags == ["global_step/sec", "loss_1", "worst_1"]  # the summary ops' names: "loss", "worst" are taken
    assert sorted(converted.Tags()["scalars"]) == tags
    for tag in ("loss_1", "worst_1"):
        original = [(e.step, e.value) for e in hooks.Scalars(tag)]
        assert [e.step for e in hooks.Scalars(tag)] == [1, 6, 11]
        assert [(e.step, e.value) for e in converted.Scalars(tag)] == original
    assert [e.step for e in converted.Scalars("global_step/sec")] == [e.step for e in hooks.Scalars("global_step/sec")]
    assert hooks.Graph() is not None
    assert converted.Graph() is not None


@pytest.mark.parametrize("scalars", [True, False], ids=["with-a-loss-hook", "summaries-checkpoints-stop-only"])
def test_the_summary_op_runs_only_on_the_summary_steps(scalars: bool, tmp_path: Path) -> None:
    """SummarySaverHookTest's count: the summary op ran on the hook's steps and no others (not at the
    checkpoints' steps, 4 and 8, nor at the stop's, 12), with or without another hook's scalar to fetch."""
    graph = Graph()
    with graph.graph.as_default():
        runs_of_summary = v1.get_variable("runs", [], tf.int32, initializer=v1.zeros_initializer(), trainable=False)
        with tf.control_dependencies([v1.assign_add(runs_of_summary, 1)]):
            counted = tf.identity(graph.summary)
        final = {name: v1.train.FinalOpsHook(runs_of_summary) for name in ("hooks", "converted")}
        for name in ("hooks", "converted"):
            hooks = [
                v1.train.SummarySaverHook(save_steps=5, output_dir=str(tmp_path / name), summary_op=counted),
                v1.train.CheckpointSaverHook(str(tmp_path / name / "ckpt"), save_steps=4),
                *([v1.train.NanTensorHook(graph.loss)] if scalars else []),
                v1.train.StopAtStepHook(last_step=LAST_STEP),
                final[name],
            ]
            if name == "converted":
                hooks = hookbus.from_hooks(hooks, train_op=graph.train_op, report=lambda line: None)
            train(graph, hooks, converted=name == "converted")
    # Steps 1, 6 and 11, as the hook's timer fires, not at the checkpoints' or the stop's steps; the
    # counter starts at 0 in each session (no checkpoint restored: each list has its own directory).
    assert final["hooks"].final_ops_values == final["converted"].final_ops_values == 3


def test_logging_tensor_hook_lines(runs: dict[str, Any]) -> None:
    original = logged_lines(runs["hooks"]["records"])
    assert len(original) == 3  # iterations 0, 5, 10: steps 1, 6, 11
    assert original[0].startswith("loss = ")
    assert original[1].endswith(" (_ sec)")
    assert logged_lines(runs["converted"]["records"]) == original
    levels = {r.levelno for r in runs["converted"]["records"] if r.getMessage().startswith("loss = ")}
    assert levels == {logging.INFO}


@pytest.mark.parametrize("fail", [True, False])
def test_nan_tensor_hook(fail: bool, tmp_path: Path) -> None:
    """NanTensorHookTest: a NaN loss raises NanLossDuringTrainingError, or stops without one."""
    outcome: dict[str, Any] = {}
    for name in ("hooks", "converted"):
        graph = Graph(nan_from=4)
        with graph.graph.as_default():
            hooks = [v1.train.NanTensorHook(graph.loss, fail_on_nan_loss=fail)]
            if name == "converted":
                hooks = hookbus.from_hooks(hooks, train_op=graph.train_op, report=lambda line: None)
        if fail:
            with pytest.raises(v1.train.NanLossDuringTrainingError) as raised:
                train(graph, hooks, converted=name == "converted")
            outcome[name] = str(raised.value)
        else:
            outcome[name] = train(graph, hooks, converted=name == "converted")
    assert outcome["hooks"] == outcome["converted"]
    assert outcome["hooks"] == ("NaN loss during training." if fail else 4)


def test_after_save_returning_true_stops_training(tmp_path: Path) -> None:
    """CheckpointSaverHookTest.test_listener_stops_training_in_after_save."""
    steps = {}
    for name in ("hooks", "converted"):
        graph = Graph()
        listener = Listener(str(tmp_path / name), stop_at=4)
        with graph.graph.as_default():
            hooks: list[Any] = [
                v1.train.CheckpointSaverHook(str(tmp_path / name), save_steps=2, listeners=[listener]),
                v1.train.StopAtStepHook(last_step=LAST_STEP),
            ]
            if name == "converted":
                hooks = hookbus.from_hooks(hooks, train_op=graph.train_op, report=lambda line: None)
            v1.train.Saver()  # the SAVERS collection's saver, which the hook uses without one
            v1.add_to_collection(v1.GraphKeys.SAVERS, v1.train.Saver(max_to_keep=5))
        steps[name] = train(graph, hooks, converted=name == "converted")
    assert steps == {"hooks": 4, "converted": 4}


def test_a_resumed_training_saves_at_the_hooks_steps(tmp_path: Path) -> None:
    """A second MonitoredTrainingSession restores the last checkpoint (step 6) and saves counting from
    there, as the hook's timer does (10, 12), not at the multiples (8, 12): the same pointer after it."""
    states = {}
    for name in ("hooks", "converted"):
        directory = str(tmp_path / name)
        for last in (6, LAST_STEP):
            graph = Graph()
            with graph.graph.as_default():
                saver = v1.train.Saver(max_to_keep=2)
                hooks: list[Any] = [
                    v1.train.CheckpointSaverHook(directory, save_steps=4, saver=saver),
                    v1.train.StopAtStepHook(last_step=last),
                ]
                bus = hookbus.EventBus()  # each training its own run: the next may lock the same directory
                if name == "converted":
                    hooks = hookbus.from_hooks(hooks, bus=bus, train_op=graph.train_op, report=lambda line: None)
                with bus:  # the session made inside the run, as the guide shows
                    if name == "converted":
                        session = hookbus.monitored_training_session(hooks=hooks, checkpoint_dir=directory)
                    else:
                        scaffold = v1.train.Scaffold(saver=saver)
                        creator = v1.train.ChiefSessionCreator(scaffold=scaffold, checkpoint_dir=directory)
                        session = v1.train.MonitoredSession(creator, hooks=hooks)
                    with session as sess:
                        while not sess.should_stop():
                            sess.run(graph.train_op)
        state = tf.train.get_checkpoint_state(directory)
        states[name] = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
    assert states == {"hooks": ["model.ckpt-10", "model.ckpt-12"], "converted": ["model.ckpt-10", "model.ckpt-12"]}


def _refusal(make: Callable[[Graph], list[Any]]) -> str:
    graph = Graph()
    with graph.graph.as_default(), pytest.raises(ValueError, match="^from_hooks: ") as raised:
        hookbus.from_hooks(make(graph), report=lambda line: None)
    return str(raised.value)


def test_an_argument_with_no_equivalent_fails_before_the_session_naming_it() -> None:
    message = _refusal(lambda g: [v1.train.LoggingTensorHook({"loss": g.loss}, at_end=True)])
    assert message.startswith("from_hooks: LoggingTensorHook(at_end=True) has no hookbus equivalent")
    message = _refusal(lambda g: [v1.train.CheckpointSaverHook("ck", save_steps=1, saver=v1.train.Saver([g.w]))])
    assert "CheckpointSaverHook(saver=" in message
    assert "some variables" in message
    message = _refusal(
        lambda g: [v1.train.CheckpointSaverHook("ck", save_steps=1, saver=v1.train.Saver(max_to_keep=None))]
    )
    assert "max_to_keep=None" in message


class OwnFinalOps(v1.train.FinalOpsHook):  # type: ignore[misc,name-defined]
    """A subclass: it may behave differently, so it passes through."""


class OwnWaiter(v1.train.GlobalStepWaiterHook):  # type: ignore[misc,name-defined]
    """Another subclass."""


def test_other_hooks_pass_through_unchanged_in_order(tmp_path: Path) -> None:
    graph = Graph()
    with graph.graph.as_default():
        profiler = v1.train.ProfilerHook(save_steps=2, output_dir=str(tmp_path / "profile"))
        final = OwnFinalOps(graph.w)
        waiter = OwnWaiter(0)
        lines: list[str] = []
        hooks = hookbus.from_hooks(
            [profiler, v1.train.NanTensorHook(graph.loss), final, waiter, v1.train.StopAtStepHook(num_steps=3)],
            train_op=graph.train_op,
            report=lines.append,
        )
        assert isinstance(hooks[0], hookbus.EventBusHook)
        assert hooks[1:] == [final, waiter]
        assert lines == [
            "hookbus.from_hooks: converted ProfilerHook, NanTensorHook, StopAtStepHook into one EventBusHook; "
            "passing through unchanged: OwnFinalOps, OwnWaiter"
        ]
        assert train(graph, hooks, converted=True) == 3
    assert final.final_ops_values is not None  # the passed-through FinalOpsHook ran at the end
    assert sorted(p.name for p in (tmp_path / "profile").glob("timeline-*.json")) == ["timeline-2.json"]  # converted
    nothing: list[str] = []
    assert hookbus.from_hooks([final], report=nothing.append) == [final]
    assert nothing == ["hookbus.from_hooks: nothing converted; OwnFinalOps pass through unchanged"]


def test_feed_fn_hook_becomes_the_hooks_feed(tmp_path: Path) -> None:
    """FeedFnHookTest: every run gets the function's feed_dict, from the FeedFnHook or from the
    EventBusHook it became; the values fed reach the summaries alike."""
    steps: dict[str, list[tuple[int, float]]] = {}
    for name in ("hooks", "converted"):
        graph = Graph()
        with graph.graph.as_default():
            scale = v1.placeholder_with_default(1.0, [], name="scale")
            fed = iter(range(1, 100))
            scaled = v1.summary.scalar("scaled", scale * graph.loss)
            hooks: list[Any] = [
                v1.train.FeedFnHook(lambda scale=scale, fed=fed: {scale: float(next(fed))}),
                v1.train.SummarySaverHook(save_steps=2, output_dir=str(tmp_path / name), summary_op=scaled),
                v1.train.StopAtStepHook(last_step=6),
            ]
            if name == "converted":
                lines: list[str] = []
                hooks = hookbus.from_hooks(hooks, train_op=graph.train_op, report=lines.append)
                assert lines == [
                    "hookbus.from_hooks: converted FeedFnHook, SummarySaverHook, StopAtStepHook into one EventBusHook"
                ]
                assert len(hooks) == 1
            train(graph, hooks, converted=name == "converted")
        accumulator = EventAccumulator(str(tmp_path / name))
        accumulator.Reload()
        steps[name] = [(e.step, e.value) for e in accumulator.Scalars("scaled")]
    assert steps["converted"] == steps["hooks"]
    assert [step for step, _ in steps["hooks"]] == [1, 3, 5]
    alone: list[str] = []
    feed = v1.train.FeedFnHook(dict)
    assert hookbus.from_hooks([feed], report=alone.append) == [feed]


def test_each_sink_is_built_from_the_hooks_arguments(tmp_path: Path) -> None:
    """The arguments as TensorFlow's tests pass them: a scaffold's saver, a basename, save_secs, a
    summary_writer instead of output_dir, a list of tensor names, a formatter, fail_on_nan_loss=False,
    num_steps; read back from the sinks on the bus."""
    graph = Graph()
    with graph.graph.as_default():
        writer = v1.summary.FileWriter(str(tmp_path / "tb"))
        scaffold = v1.train.Scaffold(saver=v1.train.Saver(max_to_keep=3))
        bus = hookbus.EventBus()
        hooks = hookbus.from_hooks(
            [
                v1.train.CheckpointSaverHook(
                    str(tmp_path / "ck"), save_secs=30, scaffold=scaffold, checkpoint_basename="m.ckpt"
                ),
                v1.train.SummarySaverHook(save_secs=20, summary_writer=writer, summary_op=[graph.summary]),
                v1.train.LoggingTensorHook(["loss:0", "worst:0"], every_n_secs=15, formatter=str),
                v1.train.NanTensorHook(graph.loss, fail_on_nan_loss=False),
                v1.train.StopAtStepHook(num_steps=7),
            ],
            bus=bus,
            train_op=graph.train_op,
            report=lambda line: None,
        )
        writer.close()
    assert len(hooks) == 1
    assert isinstance(hooks[0], hookbus.EventBusHook)
    by_kind: dict[str, Any] = {type(s).__name__: s for s in bus.sinks}
    checkpoints = by_kind["CheckpointSink"]
    assert (checkpoints.directory, checkpoints.keep, checkpoints.basename) == (str(tmp_path / "ck"), 3, "m.ckpt")
    assert (checkpoints.schedule.every_n_steps, checkpoints.schedule.every_n_secs) == (None, 30)
    summaries = by_kind["TensorBoardSink"]
    assert (summaries.logdir, summaries.train_run, summaries.rate_tag) == (str(tmp_path / "tb"), "", None)
    assert (summaries.schedule.every_n_secs, summaries.keys) == (20, frozenset({"summary"}))
    lines = by_kind["LoggingSink"]
    assert (lines.order, lines.formatter, lines.schedule.every_n_secs) == (("loss:0", "worst:0"), str, 15)
    assert by_kind["NanGuardSink"].on_nan == "stop"
    assert by_kind["StopAtStepSink"].num_steps == 7
    # One fetch per tensor: the NaN hook's loss is the logging hook's "loss:0".
    assert sorted(hooks[0].keys) == ["loss:0", "summary", "worst:0"]
    # The dashboard comes along, on the hooks' values: never the summary op.
    assert by_kind["ConsoleSink"].keys == frozenset({"loss:0", "worst:0"})
