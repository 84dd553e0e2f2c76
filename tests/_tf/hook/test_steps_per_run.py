"""Steps that jump: one ``session.run`` advancing the global step by k, beside TensorFlow's own hooks.

Ports of ``basic_session_run_hooks_test.py``'s ``StopAtStepTest``, ``CheckpointSaverHookMultiStepTest``
and ``StepCounterHookTest`` (steps_per_run) as differentials: TensorFlow's hook and hookbus's sink run
on the same training, k optimizer steps per run: hookbus saves at the steps CheckpointSaverHook saves
and fires as often as StepCounterHook; it stops at the first run reaching the target, where
StopAtStepHook (which assumes one step per run) may run one more. hookbus fetches only on due
runs (and, while the increment is unknown, on the first run); TensorFlow's hooks fetch the step
on every run.
"""

from __future__ import annotations

import glob
import os
import threading
from pathlib import Path
from typing import Any, TypedDict

import pytest

import hookbus
from hookbus import EventBus, EventBusHook
from hookbus.sinks import CheckpointSink, StopAtStepSink

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1


class Model:
    """A linear model whose train op runs ``k`` optimizer steps, each advancing the global step by
    one (chained by control dependencies); the global step starts at ``start``."""

    def __init__(self, k: int, start: int = 0) -> None:
        self.global_step = v1.get_variable(
            "global_step",
            shape=[],
            dtype=tf.int64,
            initializer=v1.constant_initializer(start),
            trainable=False,
            collections=[v1.GraphKeys.GLOBAL_VARIABLES, v1.GraphKeys.GLOBAL_STEP],
        )
        self.w = v1.get_variable("w", shape=[], initializer=v1.constant_initializer(3.0))
        self.loss = tf.square(self.w - 1.0)
        op: Any = None
        for _ in range(k):
            with tf.control_dependencies([] if op is None else [op]):
                op = v1.train.GradientDescentOptimizer(0.01).minimize(self.loss, global_step=self.global_step)
        self.train_op = op


class Fed:
    """A train op advancing the global step by a fed amount per run (runs of uneven length)."""

    def __init__(self) -> None:
        self.global_step = v1.train.get_or_create_global_step()
        self.k = v1.placeholder(tf.int64, shape=[])
        self.train_op = v1.assign_add(self.global_step, self.k)


class Recording(v1.train.SessionRunHook):  # type: ignore[misc,name-defined]
    """Delegates to a hook; counts the runs whose ``before_run`` fetched something."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.fetched: list[int] = []
        self.runs = 0

    def begin(self) -> None:
        self.inner.begin()

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.inner.after_create_session(session, coord)

    def before_run(self, run_context: Any) -> Any:
        self.runs += 1
        args = self.inner.before_run(run_context)
        if args is not None:
            self.fetched.append(self.runs)
        return args

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.inner.after_run(run_context, run_values)

    def end(self, session: Any) -> None:
        self.inner.end(session)


def _train(session: Any, train_op: Any, runs: int, feeds: list[int] | None = None, k: Any = None) -> int:
    done = 0
    while not session.should_stop() and done < runs:
        session.run(train_op, feed_dict=None if feeds is None else {k: feeds[done]})
        done += 1
    return done


def _ckpt_steps(directory: Path) -> list[int]:
    return sorted(int(p.rsplit("-", 1)[1][: -len(".index")]) for p in glob.glob(str(directory / "*.index")))


# -- StopAtStepTest ---------------------------------------------------------------------------------
class Target(TypedDict, total=False):
    """Where TensorFlow's StopAtStepHook and StopAtStepSink stop: one of the two, given to both."""

    last_step: int
    num_steps: int


@pytest.mark.parametrize(
    ("k", "start", "target"),
    [
        (1, 0, {"last_step": 10}),
        (3, 0, {"last_step": 10}),
        (4, 0, {"last_step": 10}),
        (5, 0, {"last_step": 10}),
        (10, 5, {"num_steps": 10}),  # test_stop_based_with_multiple_steps: 5 -> 15 in one run
        (4, 5, {"num_steps": 10}),  # test_stop_based_on_num_step, 4 steps per run: 9, 13, 17
    ],
)
@pytest.mark.parametrize("declared", [False, True])
def test_stop_at_step_stops_where_tensorflows_stop_at_step_hook_stops(
    k: int, start: int, target: Target, declared: bool
) -> None:
    with tf.Graph().as_default():
        m = Model(k, start)
        with v1.train.MonitoredSession(hooks=[v1.train.StopAtStepHook(**target)]) as sess:
            tf_runs = _train(sess, m.train_op, 100)
    with tf.Graph().as_default():
        m = Model(k, start)
        bus = EventBus()
        bus.attach(StopAtStepSink(**target))
        declare: dict[str, Any] = {"steps_per_run": k} if declared else {}
        hook = Recording(EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op, **declare))
        with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
            our_runs = _train(sess, m.train_op, 100)
    goal = target.get("last_step", start + target.get("num_steps", 0))
    # The stop comes at the first run whose step reaches the target (a run cannot stop halfway).
    assert bus.step == start + k * our_runs
    assert bus.step >= goal > bus.step - k
    # StopAtStepHook reads the step again only once its read of the step in the run, plus one,
    # reaches the target (it assumes one step per run); that read races the train op (old or new
    # value, docs/guides/contract.md "How it works", Steps), so with more steps per run it stops on the same run
    # or one later
    # (16, not 12, at k=4). hookbus is never later, and the same at k=1.
    assert our_runs == next(r for r in range(1, 100) if start + k * r >= goal)
    assert tf_runs in ((our_runs,) if k == 1 else (our_runs, our_runs + 1))
    # TensorFlow's hook fetches the step on every run; hookbus at the stop step, and on the first
    # run once to learn the increment when it is not declared.
    assert hook.fetched == ([our_runs] if declared or our_runs == 1 else [1, our_runs])


def test_runs_of_uneven_length_stop_at_the_first_step_past_the_target_with_the_most_declared() -> None:
    """Runs of 1, 1, 5, 5 and 5 steps; ``steps_per_run=5`` (the most a run advances): the stop
    comes at 12, the first step past 10; StopAtStepHook, assuming one step per run, stops there
    or runs to 17 (its read races the train op)."""
    feeds = [1, 1, 5, 5, 5, 5]
    with tf.Graph().as_default():
        m = Fed()
        with v1.train.MonitoredSession(hooks=[v1.train.StopAtStepHook(last_step=10)]) as sess:
            tf_runs = _train(sess, m.train_op, len(feeds), feeds, m.k)
    with tf.Graph().as_default():
        m = Fed()
        bus = EventBus()
        bus.attach(StopAtStepSink(last_step=10))
        hook = EventBusHook(bus, train_op=m.train_op, steps_per_run=5)
        with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
            our_runs = _train(sess, m.train_op, len(feeds), feeds, m.k)
    assert sum(feeds[:our_runs]) == bus.step == 12
    assert sum(feeds[:tf_runs]) in (12, 17)


# -- CheckpointSaverHookMultiStepTest -----------------------------------------------------------------
@pytest.mark.parametrize(("every", "k"), [(10, 5), (5, 5), (5, 10)])
def test_checkpoints_fall_on_the_steps_checkpoint_saver_hook_saves(tmp_path: Path, every: int, k: int) -> None:
    """Both in one session, 5 runs of k steps. TensorFlow's hook also saves the initial state at
    step 0 (in ``after_create_session``); hookbus does not save a session's first step."""
    with tf.Graph().as_default():
        m = Model(k)
        theirs = v1.train.CheckpointSaverHook(
            str(tmp_path / "tf"), save_steps=every, saver=v1.train.Saver(max_to_keep=100)
        )
        bus = EventBus()
        bus.attach(CheckpointSink(tmp_path / "ours", every_n_steps=every, every_n_secs=None, keep=100))
        ours = EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
        with bus, hookbus.monitored_training_session(hooks=[theirs, ours]) as sess:
            _train(sess, m.train_op, 5)
    tf_steps = _ckpt_steps(tmp_path / "tf")
    assert tf_steps[0] == 0
    assert _ckpt_steps(tmp_path / "ours") == tf_steps[1:]
    assert tf_steps[-1] == 5 * k  # both save the last step at the end
    for step in tf_steps[1:]:  # each checkpoint holds the step in its name
        assert v1.train.load_variable(str(tmp_path / "ours" / f"model.ckpt-{step}"), "global_step") == step


class _Listener(v1.train.CheckpointSaverListener):  # type: ignore[misc,name-defined]
    """TensorFlow's listener test's MockCheckpointSaverListener: the steps of each call."""

    def __init__(self) -> None:
        self.before: list[int] = []
        self.after: list[int] = []

    def before_save(self, session: Any, global_step_value: int) -> None:
        self.before.append(int(global_step_value))

    def after_save(self, session: Any, global_step_value: int) -> None:
        self.after.append(int(global_step_value))


def test_checkpoint_saving_and_saved_are_called_where_checkpoint_saver_listeners_are(tmp_path: Path) -> None:
    """Issue 38, item 6: ``CheckpointSaverListener.before_save`` / ``after_save`` (TensorFlow's
    ``test_listener_with_monitored_session``) and the ``checkpoint_saving`` / ``checkpoint_saved``
    signals on the same training: the same steps (TensorFlow's hook also saves step 0), the
    before of each save first, and ``checkpoint_saving`` before the barrier flushes the writers."""
    listener = _Listener()
    calls: list[tuple[str, int, str]] = []
    with tf.Graph().as_default():
        m = Model(1)
        theirs = v1.train.CheckpointSaverHook(
            str(tmp_path / "tf"), save_steps=3, saver=v1.train.Saver(max_to_keep=100), listeners=[listener]
        )
        bus = EventBus()
        sink = bus.attach(CheckpointSink(tmp_path / "ours", every_n_steps=3, every_n_secs=None, keep=100))
        bus.on("checkpoint_saving", lambda e: calls.append(("saving", e.step, e.path)))
        bus.on("checkpoint_saved", lambda e: calls.append(("saved", e.step, e.path)))
        flushed = sink.flush

        def flush() -> None:  # the barrier's first call on the sink
            calls.append(("flush", -1, ""))
            flushed()

        sink.flush = flush  # type: ignore[method-assign]
        ours = EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
        with bus, hookbus.monitored_training_session(hooks=[theirs, ours]) as sess:
            _train(sess, m.train_op, 10)
    assert listener.before == listener.after == [0, 3, 6, 9, 10]  # 10: at the end
    saving = [step for kind, step, _ in calls if kind == "saving"]
    assert saving == [step for kind, step, _ in calls if kind == "saved"] == listener.before[1:]
    for at, (kind, step, path) in enumerate(calls):
        if kind == "saving":
            assert calls[at + 1][0] == "flush"  # announced before the barrier
            assert ("saved", step, path) in calls[at:]  # the path it said
            assert path.endswith(f"model.ckpt-{step}")


def test_a_stop_from_another_thread_on_a_quiet_run_saves_at_the_global_step(tmp_path: Path) -> None:
    """Runs of 1, 1, 1 steps teach the hook one step per run; the fourth advances 17. A watchdog's
    stop then acts on a run that read nothing: the step is read, so the final checkpoint is named
    after the global step it holds (20), and so are the stop and the end."""
    with tf.Graph().as_default():
        m = Fed()
        bus = EventBus()
        bus.attach(CheckpointSink(tmp_path, every_n_steps=1000, every_n_secs=None))
        stops: list[int] = []
        bus.on("stop_requested", lambda request: stops.append(request.step))
        hook = EventBusHook(bus, train_op=m.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
            for _ in range(3):
                sess.run(m.train_op, feed_dict={m.k: 1})
            watchdog = threading.Thread(target=bus.request_stop, args=("watchdog",))
            watchdog.start()
            watchdog.join()
            sess.run(m.train_op, feed_dict={m.k: 17})
            assert sess.should_stop()
    assert _ckpt_steps(tmp_path) == [20]
    assert v1.train.load_variable(os.path.join(tmp_path, "model.ckpt-20"), "global_step") == 20
    assert stops == [20]
    assert bus.step == 20


# -- StepCounterHookTest ---------------------------------------------------------------------------
def _logged_steps(directory: Path) -> list[int]:
    steps: list[int] = []
    for path in sorted(glob.glob(str(directory / "events.out.tfevents.*"))):
        for event in v1.train.summary_iterator(path):
            if any(value.tag == "global_step/sec" for value in event.summary.value):
                steps.append(int(event.step))
    return steps


@pytest.mark.parametrize(
    ("every", "k", "tf_logged"), [(10, 5, [15, 25]), (5, 5, [10, 15, 20, 25]), (5, 10, [20, 30, 40, 50])]
)
def test_step_schedules_fire_as_often_as_step_counter_hook(
    tmp_path: Path, every: int, k: int, tf_logged: list[int]
) -> None:
    """TensorFlow's timer counts from its first trigger (the first run, unlogged); hookbus's
    ``every_n_steps`` from multiples of n. Both fire once per ``every`` global steps, rounded up to
    whole runs: the same gaps, each a real global step."""
    with tf.Graph().as_default():
        m = Model(k)
        writer = v1.summary.FileWriter(str(tmp_path))
        theirs = v1.train.StepCounterHook(every_n_steps=every, summary_writer=writer)
        # As TensorFlow's own test does: the only way to tell the hook its steps per run.
        theirs._set_steps_per_run(k)
        bus = EventBus()
        fired: list[int] = []
        bus.on("after_run", lambda e: fired.append(e.step), every_n_steps=every, keys="loss")
        ours = Recording(EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op))
        with bus, hookbus.monitored_training_session(hooks=[theirs, ours]) as sess:
            _train(sess, m.train_op, 5)
        writer.close()
    assert _logged_steps(tmp_path) == tf_logged
    assert fired == [s for s in range(k, 5 * k + 1, k) if s // every > (s - k) // every]

    def gaps(steps: list[int]) -> set[int]:
        return {b - a for a, b in zip(steps, steps[1:], strict=False)}

    assert gaps(fired) == gaps(tf_logged) == {-(-every // k) * k}
    # No fetch on quiet runs: the first run reads the step once (the increment is unknown), then
    # only the due runs fetch.
    assert ours.fetched == sorted({1} | {s // k for s in fired})


def test_a_schedule_between_multiples_of_the_run_fires_where_the_step_crosses_it(tf_graph: Any) -> None:
    """3 steps per run, ``every_n_steps=10``: due at 12, 21 and 30, where ``step // 10`` grows
    (docs/guides/contract.md "How it works", Schedules). TensorFlow's timer, counting from its last
    trigger, would fire at 12, 24 (not a
    difference to port: the two rules differ by design when k does not divide n)."""
    m = Model(3)
    bus = EventBus()
    fired: list[int] = []
    bus.on("after_run", lambda e: fired.append(e.step), every_n_steps=10)
    hook = EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
    with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
        _train(sess, m.train_op, 10)
    assert fired == [12, 21, 30]


def test_steps_per_run_is_checked_at_construction(tf_graph: Any) -> None:
    m = Model(1)
    with pytest.raises(ValueError, match=r"steps_per_run must be a positive int \(got 0\)"):
        EventBusHook(EventBus(), train_op=m.train_op, steps_per_run=0)
    with pytest.raises(ValueError, match="steps_per_run counts training steps: it takes mode='train'"):
        EventBusHook(EventBus(), {"loss": m.loss}, mode="eval", steps_per_run=2)
