"""``hookbus.from_hooks``: ``FinalOpsHook``, ``GlobalStepWaiterHook`` and ``ProfilerHook``, each beside
its TensorFlow original on the same seeded training (``test_from_hooks.py``'s graph and loop).

Ported from TensorFlow's ``basic_session_run_hooks_test.py``: ``FinalOpsHookTest``
(``test_final_ops_is_scalar_tensor``, ``test_final_ops_is_tensor``, ``test_final_ops_with_dictionary``),
``GlobalStepWaiterHookTest.test_wait_for_step`` (another thread moves the global step while the hook
waits: here it moves it when the wait is announced, never after a sleep).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

import hookbus  # noqa: E402
from _convert.test_from_hooks import Graph, train  # noqa: E402 - after the importorskip


def _quiet(line: str) -> None:
    pass


# -- FinalOpsHook ------------------------------------------------------------------------------------
class Counted(Graph):
    """The graph, with a final op that counts its own runs: ``counted`` is 1 after one read."""

    def __init__(self) -> None:
        super().__init__()
        with self.graph.as_default():
            counter = v1.get_variable("counter", [], initializer=v1.zeros_initializer(), trainable=False)
            self.counted = v1.assign_add(counter, 1.0, name="counted")


STRUCTURES: dict[str, Callable[[Any], Any]] = {
    "tensor": lambda g: g.w,
    "list": lambda g: [g.w, g.loss],
    "dict": lambda g: {"w": g.w, "worst": g.worst, "counted": g.counted},
    "nested": lambda g: {"pair": (g.w, g.loss), "counted": [g.counted]},
}


def _final_run(structure: str, *, converted: bool) -> tuple[Any, int]:
    graph = Counted()
    with graph.graph.as_default():
        final = v1.train.FinalOpsHook(STRUCTURES[structure](graph))
        hooks: list[Any] = [
            v1.train.LoggingTensorHook({"loss": graph.loss}, every_n_iter=2),
            final,
            v1.train.StopAtStepHook(last_step=6),
        ]
        if converted:
            hooks = hookbus.from_hooks(hooks, train_op=graph.train_op, report=_quiet)
            assert final not in hooks
    step = train(graph, hooks, converted=converted)
    return final.final_ops_values, step


def _described(value: Any) -> Any:
    """A value's structure, types and values, for comparing two of them."""
    if isinstance(value, dict):
        return (dict, {k: _described(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return (type(value), [_described(v) for v in value])
    return (type(value), np.asarray(value).tolist())


@pytest.mark.parametrize("structure", sorted(STRUCTURES))
def test_final_ops_values_as_the_hook_fills_them(structure: str) -> None:
    """FinalOpsHookTest: the user's hook object holds the final values after the session, in the
    structure it was given, with the types a session returns; the final ops ran once, at the end
    (``counted`` is 1: never fetched on a step, not even where a sink asked for every value)."""
    theirs, their_step = _final_run(structure, converted=False)
    ours, our_step = _final_run(structure, converted=True)
    assert our_step == their_step == 6
    assert _described(ours) == _described(theirs)
    if structure == "dict":
        assert ours["counted"] == 1.0
        assert type(ours["w"]) is np.float32


def test_final_ops_alone_stay_a_hook() -> None:
    graph = Graph()
    with graph.graph.as_default():
        final = v1.train.FinalOpsHook(graph.w)
        lines: list[str] = []
        assert hookbus.from_hooks([final], report=lines.append) == [final]
    assert lines == ["hookbus.from_hooks: nothing converted; FinalOpsHook pass through unchanged"]
    with graph.graph.as_default():
        empty = v1.train.FinalOpsHook([])  # nothing to read at the end: it stays, beside a conversion
        hooks = hookbus.from_hooks([empty, v1.train.StopAtStepHook(last_step=2)], report=_quiet, dashboard=False)
    assert hooks[0] is empty
    assert isinstance(hooks[1], hookbus.EventBusHook)


def _refusal(make: Any) -> str:
    graph = Graph()
    with graph.graph.as_default(), pytest.raises(ValueError, match="^from_hooks: ") as raised:
        hookbus.from_hooks([*make(graph), v1.train.StopAtStepHook(last_step=3)], report=_quiet)
    return str(raised.value)


def test_final_ops_feed_dict_feeds_the_final_read() -> None:
    """FinalOpsHookTest.test_final_ops_with_dictionary's feeds: the final read gets the feed_dict."""
    got = []
    for converted in (False, True):
        graph = Graph()
        with graph.graph.as_default():
            scale = v1.placeholder_with_default(1.0, [], name="scale")
            final = v1.train.FinalOpsHook({"scaled": scale * graph.w}, final_ops_feed_dict={scale: 2.0})
            hooks: list[Any] = [final, v1.train.StopAtStepHook(last_step=4)]
            if converted:
                hooks = hookbus.from_hooks(hooks, train_op=graph.train_op, report=_quiet, dashboard=False)
                assert final not in hooks
        train(graph, hooks, converted=converted)
        got.append(_described(final.final_ops_values))
    assert got[0] == got[1]


def test_final_ops_with_no_equivalent_are_refused_naming_the_argument() -> None:
    def two(g: Graph) -> list[Any]:
        scale = v1.placeholder_with_default(1.0, [], name="scale")
        return [v1.train.FinalOpsHook(g.w), v1.train.FinalOpsHook(scale * g.w, final_ops_feed_dict={scale: 2.0})]

    message = _refusal(two)
    assert message.startswith("from_hooks: FinalOpsHook(final_ops_feed_dict={")
    assert "the list's one FinalOpsHook" in message
    message = _refusal(lambda g: [v1.train.FinalOpsHook([g.w, g.train_op])])
    assert message.startswith("from_hooks: FinalOpsHook(final_ops=")
    assert "an operation, not a tensor" in message
    graph = Graph()
    with graph.graph.as_default(), pytest.raises(ValueError, match="give final_fetches too"):
        hookbus.EventBusHook(hookbus.EventBus(), {"w": graph.w}, final_feed_dict={"scale:0": 2.0})


# -- GlobalStepWaiterHook ------------------------------------------------------------------------------
WAIT_UNTIL = 5


class Announced(logging.Handler):
    """Sets ``event`` when TensorFlow's GlobalStepWaiterHook logs that it waits."""

    def __init__(self, event: threading.Event) -> None:
        super().__init__(logging.INFO)
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Waiting for global step"):
            self.event.set()


def _waited_run(*, converted: bool) -> tuple[list[int], list[tuple[str, int, int]], list[Any]]:
    """Train on an in-process server while another thread, once the wait is announced (TensorFlow's
    log line; hookbus's ``waiting_for_step``), moves the global step to ``WAIT_UNTIL`` through a
    session of its own on the same server: the steps trained, hookbus's wait events, the hook list."""
    server = v1.train.Server.create_local_server()
    graph = Graph()
    with graph.graph.as_default():
        jump = v1.assign(graph.step, WAIT_UNTIL)
        hooks: list[Any] = [v1.train.GlobalStepWaiterHook(WAIT_UNTIL), v1.train.StopAtStepHook(last_step=9)]
    waiting = threading.Event()
    waits: list[tuple[str, int, int]] = []
    bus = hookbus.EventBus()
    if converted:
        with graph.graph.as_default():
            hooks = hookbus.from_hooks(hooks, bus=bus, train_op=graph.train_op, report=_quiet, dashboard=False)

        @bus.on("waiting_for_step")
        def announced(wait: Any) -> None:
            waits.append((wait.state, wait.until_step, wait.step))
            waiting.set()

    def move_the_step() -> None:
        if waiting.wait(timeout=120):
            with v1.Session(server.target, graph=graph.graph) as other:
                other.run(jump)

    mover = threading.Thread(target=move_the_step)
    logger = logging.getLogger("tensorflow")
    level, handler = logger.level, Announced(waiting)
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    mover.start()
    steps: list[int] = []
    try:
        with bus, graph.graph.as_default():
            if converted:
                session = hookbus.monitored_training_session(master=server.target, hooks=hooks)
            else:
                session = v1.train.MonitoredTrainingSession(
                    master=server.target, hooks=hooks, save_summaries_steps=None, log_step_count_steps=None
                )
            with session as sess:
                while not sess.should_stop():
                    steps.append(int(sess.run([graph.train_op, graph.step_after])[1]))
    finally:
        waiting.set()  # a run that never waited lets the mover go
        mover.join()
        logger.removeHandler(handler)
        logger.setLevel(level)
    return steps, waits, hooks


def test_global_step_waiter_waits_where_it_was_installed() -> None:
    """GlobalStepWaiterHookTest.test_wait_for_step: on one machine (the chief of no cluster) the
    hook waits until another thread moves the global step, then trains from there; the converted
    start gate waits the same, where hookbus's own ``wait_for_step`` alone would not wait."""
    theirs, _, _ = _waited_run(converted=False)
    ours, waits, hooks = _waited_run(converted=True)
    assert theirs == ours == [6, 7, 8, 9]
    assert len(hooks) == 1
    assert isinstance(hooks[0], hookbus.EventBusHook)
    assert waits[0] == ("waiting", WAIT_UNTIL, 0)
    assert waits[-1] == ("reached", WAIT_UNTIL, WAIT_UNTIL)


def test_a_stop_ends_the_converted_wait_before_any_step() -> None:
    """What the hook lacks: a stop asked from another thread while it waits ends the wait, and no
    step is trained (TensorFlow's hook polls for ever)."""
    graph = Graph()
    bus = hookbus.EventBus()
    with graph.graph.as_default():
        hooks = hookbus.from_hooks(
            [v1.train.GlobalStepWaiterHook(1000), v1.train.StopAtStepHook(last_step=3)],
            bus=bus,
            train_op=graph.train_op,
            report=_quiet,
            dashboard=False,
        )
    states: list[str] = []

    @bus.on("waiting_for_step")
    def stop_it(wait: Any) -> None:
        states.append(wait.state)
        if wait.state == "waiting":
            threading.Thread(target=bus.request_stop, args=("from another thread",)).start()

    with bus:
        assert train(graph, hooks, converted=True) == 0
    assert states == ["waiting", "stopped"]
    assert bus.stop_reason == "from another thread"


def test_global_step_waiter_alone_stays_a_hook_and_a_bad_step_is_refused() -> None:
    graph = Graph()
    with graph.graph.as_default():
        waiter = v1.train.GlobalStepWaiterHook(3)
        assert hookbus.from_hooks([waiter], report=_quiet) == [waiter]
    message = _refusal(lambda g: [v1.train.GlobalStepWaiterHook(2.5)])
    assert message.startswith("from_hooks: GlobalStepWaiterHook(wait_until_step=2.5) has no hookbus equivalent")


# -- ProfilerHook ----------------------------------------------------------------------------------------
def _profiled_run(root: Path, *, converted: bool) -> tuple[int, list[Any]]:
    graph = Graph()
    with graph.graph.as_default():
        hooks: list[Any] = [
            v1.train.ProfilerHook(save_steps=3, output_dir=str(root), show_memory=True),
            v1.train.StopAtStepHook(last_step=10),
        ]
        if converted:
            hooks = hookbus.from_hooks(hooks, train_op=graph.train_op, report=_quiet, dashboard=False)
    step = train(graph, hooks, converted=converted)
    v1.summary.FileWriterCache.clear()  # the hook's cached writer holds its run metadata until closed
    return step, hooks


def test_profiler_hook_never_traces_a_sessions_first_run(tmp_path: Path) -> None:
    """ProfilerHookTest.test_save_steps_does_not_save_in_first_step and test_run_metadata_saves:
    ``save_steps=1`` traces every run but the session's first (here without a train op, so no run
    learns the step's increment first)."""
    for name in ("hooks", "converted"):
        graph = Graph()
        with graph.graph.as_default():
            hooks: list[Any] = [
                v1.train.ProfilerHook(save_steps=1, output_dir=str(tmp_path / name)),
                v1.train.StopAtStepHook(last_step=3),
            ]
            if name == "converted":
                hooks = hookbus.from_hooks(hooks, report=_quiet, dashboard=False)
        train(graph, hooks, converted=name == "converted")
        v1.summary.FileWriterCache.clear()
    for name in ("hooks", "converted"):
        assert sorted(p.name for p in (tmp_path / name).glob("timeline-*.json")) == [
            "timeline-2.json",
            "timeline-3.json",
        ]
        accumulator = EventAccumulator(str(tmp_path / name))
        accumulator.Reload()
        assert sorted(accumulator.Tags()["run_metadata"]) == ["step_2", "step_3"]


def _nodes(path: Path) -> set[str]:
    """The graph nodes a Chrome trace shows running (its complete events' ``args.name``)."""
    trace = json.loads(path.read_text())
    return {e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "X" and "name" in e.get("args", {})}


def test_profiler_hook_timelines_at_the_same_steps_and_paths(tmp_path: Path) -> None:
    """ProfilerHookTest (``test_save_steps``, ``test_run_metadata_saves``): ``timeline-<step>.json``
    Chrome traces at the hook's steps (never the session's first run), each showing the model's
    ops running, and the run metadata tagged ``step_<step>`` in ``output_dir``'s event files."""
    their_step, _ = _profiled_run(tmp_path / "hooks", converted=False)
    our_step, hooks = _profiled_run(tmp_path / "converted", converted=True)
    assert our_step == their_step == 10
    assert len(hooks) == 1
    names = ["timeline-3.json", "timeline-6.json", "timeline-9.json"]
    for name in ("hooks", "converted"):
        assert sorted(p.name for p in (tmp_path / name).glob("timeline-*.json")) == names
    for timeline in names:
        theirs, ours = _nodes(tmp_path / "hooks" / timeline), _nodes(tmp_path / "converted" / timeline)
        model = {n for n in theirs if n.startswith(("GradientDescent", "gradients", "w", "loss"))}
        assert model
        assert model <= ours
    for name in ("hooks", "converted"):
        accumulator = EventAccumulator(str(tmp_path / name))
        accumulator.Reload()
        assert sorted(accumulator.Tags()["run_metadata"]) == ["step_3", "step_6", "step_9"]
        assert accumulator.RunMetadata("step_6").step_stats.dev_stats


def test_a_timeline_sink_alone_traces_only_its_steps(tmp_path: Path) -> None:
    """No publisher's run is traced but a due one: a TimelineSink with a step schedule writes only its
    steps' timelines, and the runs between carry no trace (the hook asks for none)."""
    graph = Graph()
    bus = hookbus.EventBus()
    timelines = bus.attach(hookbus.sinks.TimelineSink(tmp_path, every_n_steps=4))
    bus.attach(hookbus.sinks.StopAtStepSink(last_step=9))
    traced: list[int] = []

    @bus.on("after_run", every_n_steps=1)
    def seen(event: hookbus.Event) -> None:
        trace = timelines.context.profiler.run_trace()
        if trace is not None and trace.step == event.step:
            traced.append(event.step)

    with graph.graph.as_default():
        hook = hookbus.EventBusHook(bus, train_op=graph.train_op)
    with bus:
        assert train(graph, [hook], converted=True) == 9
    assert sorted(p.name for p in tmp_path.glob("timeline-*.json")) == ["timeline-4.json", "timeline-8.json"]
    assert traced == [4, 8]
    assert [os.path.basename(p) for p in timelines.written] == ["timeline-4.json", "timeline-8.json"]
