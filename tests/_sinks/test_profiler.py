"""ProfilerSink: windows of global steps traced by TensorFlow's profiler, read back from the ``.xplane.pb``.

Every publisher (TF1 hook, Keras ``fit``, loop) is checked by reading its traces back: the files
exist where TensorBoard's profile plugin looks, parse as TensorFlow's ``XSpace``, and hold one
step marker per profiled step with its global step. Two workers on one host keep two traces, and
a real TensorBoard with the profile plugin lists the runs and their steps.
"""

from __future__ import annotations

import gzip
import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from _clusters import collect, free_ports, reports, start, stop
from _tb import tensorboard
from _xplane import marked_steps, traces

import hookbus
from hookbus import Event, EventBus
from hookbus.sinks import CheckpointSink, ProfilerSink, StopAtStepSink
from hookbus.sinks.profiler import next_window

# -- windows (no TensorFlow) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "num", "every", "after", "window"),
    [
        (10, 5, None, 1, (10, 14)),  # a fresh start: the first window as asked
        (1, 5, None, 1, (2, 5)),  # step 1 is the session's first step: never profiled
        (10, 5, None, 11, (12, 14)),  # a resume at 10: its first step 11 is not, 12.. are
        (10, 5, None, 14, None),  # past the one window
        (10, 5, 100, 14, (110, 114)),  # the next repeat
        (10, 5, 100, 111, (112, 114)),  # a resume inside a repeat
        (10, 5, 100, 500, (510, 514)),
    ],
)
def test_next_window(start: int, num: int, every: int | None, after: int, window: tuple[int, int] | None) -> None:
    assert next_window(start, num, every, after) == window


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_step": 0}, r"start_step must be a positive int \(got 0\)"),
        ({"num_steps": -1}, r"num_steps must be a positive int \(got -1\)"),
        ({"num_steps": 10, "every_n_steps": 5}, r"every_n_steps must be at least num_steps=10 .* \(got 5\)"),
        ({"host_tracer_level": 0}, r"host_tracer_level must be one of 1, 2, 3 \(got 0\)"),
        ({"python_tracer_level": True}, r"python_tracer_level must be one of 0, 1 \(got True\)"),
        ({"device_tracer_level": 2}, r"device_tracer_level must be one of 0, 1 \(got 2\)"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProfilerSink("logs", **kwargs)


# -- the publishers, read back -----------------------------------------------------------------


def _run_steps(path: str) -> tuple[int, int]:
    found = re.search(r"_steps_(\d+)-(\d+)", Path(path).name)
    assert found, path
    return int(found[1]), int(found[2])


def _by_window(logdir: Path) -> dict[tuple[int, int], list[int]]:
    return {_run_steps(str(trace.parent)): marked_steps(trace) for trace in traces(logdir)}


@pytest.mark.tf
def test_tf1_hook_traces_windows_of_global_steps_never_a_sessions_first(tmp_path: Path, tf_graph: Any) -> None:
    from hookbus._cli._demo import build_linear_regression

    m = build_linear_regression()
    logdir, ckpt = tmp_path / "tb", tmp_path / "ckpt"
    # Windows 10-13 and 20-23; the first session stops at 21 (a trace in progress is saved at
    # the end), the second resumes at 21 from the checkpoint, so its first step 22 is not profiled.
    for last in (21, 30):
        bus = EventBus()
        sink = bus.attach(ProfilerSink(logdir, start_step=10, num_steps=4, every_n_steps=10))
        bus.attach(CheckpointSink(ckpt, every_n_steps=7, every_n_secs=None))
        bus.attach(StopAtStepSink(last_step=last))
        hook = hookbus.EventBusHook(bus, fetches={"loss": m.loss}, train_op=m.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(ckpt)) as sess:
            while not sess.should_stop():
                sess.run(m.train_op)
        assert sink.report.skipped == ()
    assert _by_window(logdir) == {(10, 13): [10, 11, 12, 13], (20, 21): [20, 21], (23, 23): [23], (30, 30): [30]}
    names = sorted(p.name for p in (logdir / "plugins" / "profile").iterdir())
    assert all(re.fullmatch(r"\d{4}(_\d\d){5}_steps_\d+-\d+", n) for n in names), names
    assert not [p for p in logdir.iterdir() if p.name.startswith(".hookbus-profile-")]  # scratch removed


@pytest.mark.tf
def test_keras_fit_markers_carry_global_steps_not_batch_indices(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    import numpy as np

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    x = np.ones((32, 3), "float32")
    bus = EventBus()
    sink = bus.attach(ProfilerSink(tmp_path, start_step=6, num_steps=4))
    with bus:  # 4 batches an epoch: steps 6-9 are batches 1, 2, 3 of epoch 2 and batch 0 of epoch 3
        model.fit(x, x.sum(axis=1), batch_size=8, epochs=3, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])
    assert _by_window(tmp_path) == {(6, 9): [6, 7, 8, 9]}
    assert len(sink.report.saved) == 1


@pytest.mark.tf
def test_loop_publisher_marks_each_step_of_the_window(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    w = tf.Variable(1.0)
    optimizer = tf.keras.optimizers.SGD(0.1)

    @tf.function  # type: ignore[untyped-decorator]
    def train_step() -> Any:
        with tf.GradientTape() as tape:
            loss = w * w
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        return {"loss": loss}

    bus = EventBus()
    sink = bus.attach(ProfilerSink(tmp_path, start_step=3, num_steps=3, every_n_steps=5))
    loop = hookbus.LoopPublisher(bus, ["loss"], step_counter=optimizer.iterations)
    with bus, loop:
        for _ in range(12):  # windows 3-5, 8-10 (13-15 never comes)
            loop.step(train_step())
    assert _by_window(tmp_path) == {(3, 5): [3, 4, 5], (8, 10): [8, 9, 10]}
    assert f"tensorboard --logdir {tmp_path}" in (sink.status() or "")


@pytest.mark.tf
def test_a_stop_and_an_exception_save_the_trace_in_progress(tmp_path: Path, tf_graph: Any) -> None:
    from hookbus._cli._demo import build_linear_regression

    m = build_linear_regression()
    bus = EventBus()
    bus.attach(ProfilerSink(tmp_path / "stop", start_step=5, num_steps=5))
    bus.attach(StopAtStepSink(last_step=7))
    hook = hookbus.EventBusHook(bus, fetches={"loss": m.loss}, train_op=m.train_op)
    with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
        while not sess.should_stop():
            sess.run(m.train_op)
    assert _by_window(tmp_path / "stop") == {(5, 7): [5, 6, 7]}

    bus = EventBus()
    bus.attach(ProfilerSink(tmp_path / "raise", start_step=5, num_steps=5))

    @bus.on("after_run", every_n_steps=6)
    def fail(event: Event) -> None:
        raise RuntimeError(f"failed at {event.step}")

    hook = hookbus.EventBusHook(bus, fetches={"loss": m.loss}, train_op=m.train_op)

    def train() -> None:
        with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
            while not sess.should_stop():
                sess.run(m.train_op)

    with pytest.raises(RuntimeError, match="failed at 6"):
        train()
    assert _by_window(tmp_path / "raise") == {(5, 6): [5, 6]}


@pytest.mark.tf
def test_a_new_session_saves_the_trace_in_progress_and_its_first_step_is_not_traced(
    tmp_path: Path, tf_graph: Any
) -> None:
    """MonitoredSession re-creates its session after an AbortedError at step 6 (restored from the
    checkpoint at 6, no window left to ask for): the trace of window 3-7 in progress is saved
    with steps 3-6, and the new session's first step, 7, is not traced into it."""
    tf = pytest.importorskip("tensorflow")
    from hookbus._cli._demo import build_linear_regression

    m = build_linear_regression()

    class AbortOnce(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc,name-defined]
        raised = False

        def after_run(self, run_context: Any, run_values: Any) -> None:
            step = int(run_context.session.run(tf.compat.v1.train.get_global_step()))
            if step == 6 and not self.raised:
                self.raised = True
                raise tf.errors.AbortedError(None, None, "preempted (test)")

    bus = EventBus()
    sink = bus.attach(ProfilerSink(tmp_path / "tb", start_step=3, num_steps=5))
    bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=6, every_n_secs=None))
    bus.attach(StopAtStepSink(last_step=9))
    restored: list[int] = []
    bus.on("session_created", lambda e: restored.append(e.step) if e.restored else None)
    hook = hookbus.EventBusHook(bus, fetches={"loss": m.loss}, train_op=m.train_op)
    hooks = [hook, AbortOnce()]
    with bus, hookbus.monitored_training_session(hooks=hooks, checkpoint_dir=str(tmp_path / "ckpt")) as sess:
        while not sess.should_stop():
            sess.run(m.train_op)
    assert restored == [6]
    assert _by_window(tmp_path / "tb") == {(3, 6): [3, 4, 5, 6]}
    assert sink.report.skipped == ()


@pytest.mark.tf
def test_a_running_profiler_is_reported_and_the_window_skipped(
    tmp_path: Path, tf_graph: Any, caplog: pytest.LogCaptureFixture
) -> None:
    tf = pytest.importorskip("tensorflow")
    from hookbus._cli._demo import build_linear_regression

    m = build_linear_regression()
    bus = EventBus()
    sink = bus.attach(ProfilerSink(tmp_path / "ours", start_step=3, num_steps=2, every_n_steps=5))
    statuses: list[str | None] = []
    bus.on("after_run", lambda e: statuses.append(sink.status()), every_n_steps=1)
    hook = hookbus.EventBusHook(bus, fetches={"loss": m.loss}, train_op=m.train_op)
    tf.profiler.experimental.start(str(tmp_path / "users"))  # the user's own profiler
    try:
        with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
            while not sess.should_stop() and bus.step < 9:
                sess.run(m.train_op)
    finally:
        tf.profiler.experimental.stop()  # still the user's: ours never stopped it
    assert bus.step == 9  # training went on
    assert sink.report.saved == ()
    assert [line.split(":")[0] for line in sink.report.skipped] == ["steps 3–4 not profiled", "steps 8–9 not profiled"]
    assert all("another profiler is running" in line for line in sink.report.skipped)
    assert "another profiler is running" in caplog.text
    assert (statuses[-1] or "").startswith("steps 8–9 not profiled")
    assert traces(tmp_path / "ours") == []
    assert len(traces(tmp_path / "users")) == 1


@pytest.mark.tf
def test_the_dashboard_says_which_steps_are_profiled(tmp_path: Path, tf_graph: Any) -> None:
    from hookbus._cli._demo import build_linear_regression

    m = build_linear_regression()
    bus = EventBus()
    sink = bus.attach(ProfilerSink(tmp_path, start_step=4, num_steps=3))
    seen: dict[int, str | None] = {}
    bus.on("after_run", lambda e: seen.update({e.step: sink.status()}), every_n_steps=1)
    hook = hookbus.EventBusHook(bus, fetches={"loss": m.loss}, train_op=m.train_op)
    with bus, hookbus.monitored_training_session(hooks=[hook]) as sess:
        while not sess.should_stop() and bus.step < 8:
            sess.run(m.train_op)
    assert seen[3] is None
    assert seen[4] == seen[5] == "profiling steps 4–6"
    assert seen[7] == f"trace of steps 4–6 saved: tensorboard --logdir {tmp_path} (Profile tab)"


# -- two workers on one host; TensorBoard --------------------------------------------------------


@pytest.mark.subprocess
def test_two_workers_on_one_host_keep_two_traces(tmp_path: Path) -> None:
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    child = Path(__file__).with_name("_profiler_child.py")
    workers = [start(child, {"cluster": cluster, "index": i, "out": str(tmp_path)}) for i in range(2)]
    runs = {"profile": {"workers": workers, "out": tmp_path}}
    try:
        collect(runs, 120)
    finally:
        stop(workers)
    got = reports(runs, "profile")
    assert [r["skipped"] for r in got] == [[], []]
    saved = sorted(Path(p).name for r in got for p in r["saved"])
    assert [n.split("_steps_")[1] for n in saved] == ["3-5_worker_0", "3-5_worker_1"]
    found = traces(tmp_path / "tb")
    assert len(found) == 2  # TensorFlow's own names (the second, the host) would have left one
    assert [marked_steps(t) for t in found] == [[3, 4, 5], [3, 4, 5]]


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        body = response.read()
        # The profile plugin gzips its answers whatever the request accepts.
        return json.loads(gzip.decompress(body) if response.headers.get("Content-Encoding") == "gzip" else body)


@pytest.mark.tf
def test_tensorboard_profile_plugin_lists_the_runs_and_their_steps(tmp_path: Path) -> None:
    pytest.importorskip("xprof", reason="tensorboard-plugin-profile (the dev extra) is not installed")
    tf = pytest.importorskip("tensorflow")
    w = tf.Variable(1.0)
    bus = EventBus()
    bus.attach(ProfilerSink(tmp_path, start_step=2, num_steps=3, every_n_steps=3))
    loop = hookbus.LoopPublisher(bus, ["loss"])
    with bus, loop:
        for _ in range(7):  # windows 2-4 and 5-7, saved within the same second
            w.assign_add(1.0)
            loop.step({"loss": w})
    runs = sorted(_run_steps(str(t.parent)) for t in traces(tmp_path))
    assert runs == [(2, 4), (5, 7)]

    with tensorboard(tmp_path, []) as server:
        port = server.port
        listed: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(listed) < 2 and server.proc.poll() is None:
            try:
                listed = _get(port, "/data/plugin/profile/runs")
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        assert sorted(_run_steps(r) for r in listed) == runs, server.log.read_text()[-3000:]
        steps = {}
        for run in listed:
            host = _get(port, f"/data/plugin/profile/hosts?run={run}&tag=overview_page")[0]["hostname"]
            tables = _get(port, f"/data/plugin/profile/data?run={run}&tag=overview_page&host={host}")
            step_table = next(t for t in tables if any(c["id"] == "stepnum" for c in t.get("cols", [])))
            steps[_run_steps(run)] = [row["c"][0]["v"] for row in step_table["rows"]]
        # The overview page's step-time graph, from the step markers ("No step marker observed" otherwise).
        assert steps == {(2, 4): ["train 2", "train 3", "train 4"], (5, 7): ["train 5", "train 6", "train 7"]}
