"""TensorBoardSink: driven by ScriptedPublisher, read back by TensorBoard's three readers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _tb import check_served, rust_data_server_or_skip, serve_and_read
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto.summary_pb2 import Summary

import hookbus
from hookbus.sinks import TensorBoardSink
from hookbus.testing import FakeClock, ScriptedPublisher

EVERY = 5
TRAIN_TAGS = ("loss", "raw/metric", "steps/sec")


def loss(step: int, gen: int) -> float:
    return step + gen / 4  # exact in float32, so every reader returns it unchanged


def eval_loss(step: int, gen: int) -> float:
    return -step - gen / 4


def _values(step: int, gen: int) -> dict[str, Any]:
    raw = Summary(value=[Summary.Value(tag="raw/metric", simple_value=2 * step + gen)]).SerializeToString()
    return {"loss": loss(step, gen), "weights": np.arange(step, step + 10.0), "summary": raw}


def _process(logdir: Path, sessions: list[tuple[int, int, int, list[int]]]) -> None:
    """One process: for each (start, stop, generation, eval steps), a session from start to stop."""
    bus = hookbus.EventBus(clock=FakeClock(), wall_clock=FakeClock(1.7e9, 0.25))
    bus.attach(TensorBoardSink(logdir, every_n_steps=EVERY, hparams={"lr": 0.1, "opt": "sgd"}))
    train = ScriptedPublisher(bus, ["loss", "weights", "summary"])
    evaluate = ScriptedPublisher(bus, ["loss"], mode="eval")
    with bus:
        train.begin()
        evaluate.begin()
        for start, stop, gen, evals in sessions:
            train.session(start)
            for step in range(start + 1, stop + 1):
                train.advance(lambda s, g=gen: _values(s, g))  # type: ignore[misc]
                if step in evals:
                    evaluate.evaluate({"loss": eval_loss(step, gen)}, step=step)
        # no end(): the process is killed after step 35 of its second session


def resumed_run(logdir: Path) -> tuple[dict[int, float], dict[int, float]]:
    """To 30 (evals 10, 20, 30); re-created at 20, to 35 (eval 30); killed; resumed at 30, to 40.

    Returns the surviving timeline: train loss and eval loss by step.
    """
    _process(logdir, [(0, 30, 1, [10, 20, 30]), (20, 35, 2, [30])])
    _process(logdir, [(30, 40, 3, [40])])
    gen = {s: 1 if s <= 20 else 2 if s <= 30 else 3 for s in range(1, 41)}
    train = {s: loss(s, gen[s]) for s in range(EVERY, 41, EVERY)}
    evals = {s: eval_loss(s, gen[s]) for s in (10, 20, 30, 40)}
    return train, evals


@pytest.fixture(scope="module")
def resumed_logdir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, float], dict[int, float]]:
    logdir = tmp_path_factory.mktemp("tb") / "run"
    train, evals = resumed_run(logdir)
    return logdir, train, evals


def test_event_files_sort_in_creation_order_and_have_our_suffix(tmp_path: Path) -> None:
    made = []
    train = tmp_path / "train"  # the training run's directory
    for _ in range(3):
        _process(tmp_path, [(0, 5, 1, [])])
        files = [p for p in train.iterdir() if p.is_file() and p.name != ".events.lock"]  # the one-writer lock
        made.append(max(files, key=lambda p: p.stat().st_mtime_ns).name)
    # at the logdir's root only the HParams session (one: each run started from step 0 replaced it)
    assert [p.name.rsplit(".", 1)[1] for p in tmp_path.glob("events.out.tfevents.*")] == ["hookbus-hparams"]
    names = sorted(p.name for p in train.iterdir() if p.is_file() and p.name != ".events.lock")
    assert len(names) == 3
    assert names == made
    assert all(n.startswith("events.out.tfevents.") and n.endswith(".hookbus") for n in names)


def test_each_worker_writes_its_training_run_in_its_own_train_directory(tmp_path: Path) -> None:
    """``runs_on="each"``: worker i's training run is ``logdir/worker-<i>/train``, none at a root."""
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(TensorBoardSink(tmp_path, every_n_steps=1, runs_on="each"))
    with bus:
        ScriptedPublisher(bus, keys=["loss"], task=hookbus.Task("worker", 1)).run([{"loss": 1.0}] * 3)
    runs = sorted(str(p.parent.relative_to(tmp_path)) for p in tmp_path.rglob("events.out.tfevents.*"))
    assert runs == ["worker-1/train"]
    acc = event_accumulator.EventAccumulator(str(tmp_path / "worker-1" / "train")).Reload()
    assert [e.step for e in acc.Scalars("loss")] == [1, 2, 3]


def test_legacy_event_accumulator_reads_each_step_once(resumed_logdir: Any) -> None:
    logdir, train, evals = resumed_logdir
    acc = event_accumulator.EventAccumulator(str(logdir / "train"), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    assert {e.step: e.value for e in acc.Scalars("loss")} == train
    assert [e.step for e in acc.Scalars("loss")] == sorted(train)
    for tag in ("raw/metric", "steps/sec"):
        assert [e.step for e in acc.Scalars(tag)] == sorted(train), tag
    raw = {e.step: e.value for e in acc.Scalars("raw/metric")}
    assert raw == {s: 2 * s + (1 if s <= 20 else 2 if s <= 30 else 3) for s in train}
    histos = acc.Histograms("weights")
    assert [h.step for h in histos] == sorted(train)
    assert all(h.histogram_value.min == h.step and h.histogram_value.num == 10 for h in histos)
    ev = event_accumulator.EventAccumulator(str(logdir / "eval"), size_guidance={"scalars": 0}).Reload()
    assert {e.step: e.value for e in ev.Scalars("loss")} == evals
    assert [e.step for e in ev.Scalars("loss")] == sorted(evals)


def test_restart_marker_at_every_session_start_in_every_sub_run(resumed_logdir: Any) -> None:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    logdir, _, _ = resumed_logdir
    for run, expected in (("train", [1, 21, 31]), ("eval", [1, 21, 31])):
        files = sorted(p for p in (logdir / run).iterdir() if p.name.startswith("events.out.tfevents."))
        markers = [e.step for f in files for e in EventFileLoader(str(f)).Load() if e.HasField("session_log")]
        assert markers == expected, run


def test_steps_per_sec_is_steps_between_firings_over_wall_seconds(tmp_path: Path) -> None:
    bus = hookbus.EventBus(clock=FakeClock(), wall_clock=FakeClock(100.0, 1.0))
    bus.attach(TensorBoardSink(tmp_path, every_n_steps=10))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run({"loss": 1.0} for _ in range(30))
    acc = event_accumulator.EventAccumulator(str(tmp_path / "train")).Reload()
    # wall_clock ticks once per event: session at 101, then one after_run event per firing.
    assert [(e.step, e.value) for e in acc.Scalars("steps/sec")] == [(10, 10.0), (20, 10.0), (30, 10.0)]


def test_hparams_session_start_and_end_at_the_logdirs_root(tmp_path: Path) -> None:
    """The session (see test_tensorboard_hparams.py) is the root's run, none is in train/."""
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(TensorBoardSink(tmp_path, hparams={"lr": 0.5, "layers": 3, "opt": "adam", "bn": True}))
    with bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}])
    acc = event_accumulator.EventAccumulator(str(tmp_path)).Reload()
    assert sorted(acc.Tags()["tensors"]) == ["_hparams_/session_end_info", "_hparams_/session_start_info"]
    start, end = (acc.summary_metadata[f"_hparams_/session_{s}_info"].plugin_data.content for s in ("start", "end"))
    info = plugin_data_pb2.HParamsPluginData.FromString(start).session_start_info
    assert dict(info.hparams)["lr"].number_value == 0.5
    assert dict(info.hparams)["opt"].string_value == "adam"
    assert plugin_data_pb2.HParamsPluginData.FromString(end).session_end_info.status == api_pb2.STATUS_SUCCESS
    train = event_accumulator.EventAccumulator(str(tmp_path / "train")).Reload()
    assert not [t for t in train.Tags()["tensors"] if t.startswith("_hparams_")]


def test_nan_scalars_and_nonfinite_arrays(tmp_path: Path) -> None:
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(TensorBoardSink(tmp_path, every_n_steps=1, keys=["loss", "w"]))
    pub = ScriptedPublisher(bus, ["loss", "w", "other"])
    with bus:
        pub.run([{"loss": float("nan"), "w": np.array([1.0, np.inf, np.nan, 3.0]), "other": 5.0}])
    acc = event_accumulator.EventAccumulator(str(tmp_path / "train")).Reload()
    assert np.isnan(acc.Scalars("loss")[0].value)
    assert "other" not in acc.Tags()["scalars"]  # keys= filters what is written
    assert acc.Histograms("w")[0].histogram_value.num == 2  # only the finite values are binned


def test_flush_makes_events_readable_before_close(tmp_path: Path) -> None:
    bus = hookbus.EventBus(clock=FakeClock())
    sink = bus.attach(TensorBoardSink(tmp_path, every_n_steps=1, flush_secs=3600))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(3):
            pub.advance({"loss": 1.0})
        sink.flush()
        acc = event_accumulator.EventAccumulator(str(tmp_path / "train")).Reload()
        assert [e.step for e in acc.Scalars("loss")] == [1, 2, 3]
        pub.end()


def test_malformed_summary_bytes_are_isolated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(TensorBoardSink(tmp_path, every_n_steps=1))
    errors: list[Any] = []
    bus.subscriber_error.connect(lambda sender, event: errors.append(event), weak=False)
    with bus:
        ScriptedPublisher(bus, ["summary", "loss"]).run([{"summary": b"\xff\xff not a proto", "loss": 1.0}])
    assert errors
    assert errors[0].subscriber == "TensorBoardSink"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every_n_steps": 0}, "every_n_steps must be a positive int (got 0)"),
        ({"flush_secs": 0}, "flush_secs must be a positive finite number of seconds (got 0)"),
        ({"max_queue_size": 0}, "max_queue_size must be a positive int (got 0)"),
        ({"hparams": {"lr": [1]}}, "hparams must map names to bool, int, float or str"),
        ({"on_error": "ignore"}, "on_error must be one of"),
    ],
)
def test_invalid_arguments_fail_at_construction(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TensorBoardSink(tmp_path, **kwargs)


def test_invalid_logdir_fails_at_construction(tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ValueError, match="is an existing file"):
        TensorBoardSink(afile)
    with pytest.raises(ValueError, match="is not a directory"):
        TensorBoardSink(afile / "sub")
    with pytest.raises(ValueError, match="logdir must be a non-empty str or os.PathLike"):
        TensorBoardSink(3)  # type: ignore[arg-type]


def test_sink_module_does_not_import_tensorflow() -> None:
    code = "import sys, hookbus.sinks.tensorboard, hookbus._writers._writer; print('tensorflow' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # hookbus/__init__ imports the publishers (which import TensorFlow); block that to see the sink alone.
    code = "import sys; sys.modules['tensorflow'] = None; " + code.replace("'tensorflow' in", "'tensorflow.python' in")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


# -- real TensorBoard servers ---------------------------------------------------------------


def _expected(train: dict[int, float], evals: dict[int, float]) -> dict[tuple[str, str], dict[int, float]]:
    raw = {s: float(2 * s + (1 if s <= 20 else 2 if s <= 30 else 3)) for s in train}
    return {("train", "loss"): train, ("train", "raw/metric"): raw, ("eval", "loss"): evals}


@pytest.mark.subprocess
def test_python_loader_server_reads_each_step_once(resumed_logdir: Any) -> None:
    logdir, train, evals = resumed_logdir
    want = _expected(train, evals)
    got, log = serve_and_read(logdir, ["--load_fast=false"], want)
    check_served(got, want, log)


@pytest.mark.subprocess
def test_default_rust_data_server_reads_each_step_once(resumed_logdir: Any) -> None:
    rust_data_server_or_skip()
    logdir, train, evals = resumed_logdir
    want = _expected(train, evals)
    got, log = serve_and_read(logdir, ["--load_fast=true"], want)  # true: fail rather than fall back
    check_served(got, want, log)


def test_close_returns_within_its_deadline_when_the_event_file_hangs(tmp_path: Path) -> None:
    """TensorBoard's writer joins its thread with no timeout: closing on a stalled disk must not hang
    the run's end. The writer's close is held (a stand-in for a disk that stopped answering)."""
    import threading

    from hookbus._writers._writer import WriterWarning

    bus = hookbus.EventBus()
    sink = bus.attach(TensorBoardSink(tmp_path / "tb", every_n_steps=1, close_deadline=0.2))
    release = threading.Event()
    with bus:
        ScriptedPublisher(bus, keys=["loss"]).run([{"loss": 1.0}] * 3)
        (writer,) = sink._writers.values()
        real_close = writer.close
        writer.close = lambda: (release.wait(60), real_close())
        with pytest.warns(WriterWarning, match="TensorBoardSink: the event files in .* did not close within 0.2 s"):
            sink.close()
    release.set()


def test_the_training_graph_is_written_once_as_tensorflows_own_hooks_wrote_it(tmp_path: Path) -> None:
    """Differential with SummarySaverHook on the same model: TensorBoard's reader finds a graph in
    both event files, and ours holds every node of TensorFlow's (plus hookbus's own reads)."""
    tf = pytest.importorskip("tensorflow")
    from hookbus._cli._demo import build_linear_regression

    def graph_nodes(logdir: Path) -> set[str]:
        accumulator = event_accumulator.EventAccumulator(str(logdir))
        accumulator.Reload()
        return {node.name for node in accumulator.Graph().node}

    with tf.Graph().as_default():
        model = build_linear_regression()
        summary = tf.compat.v1.summary.scalar("loss", model.loss)
        hook = tf.compat.v1.train.SummarySaverHook(save_steps=10, output_dir=str(tmp_path / "tf"), summary_op=summary)
        plain = {"save_summaries_steps": None, "save_checkpoint_secs": None, "log_step_count_steps": None}
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook], **plain) as s:
            for _ in range(5):
                s.run(model.train_op)
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(TensorBoardSink(tmp_path / "ours", every_n_steps=1))
        publisher = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus:
            for _ in range(2):  # two sessions in one run: the graph is written once
                with hookbus.monitored_training_session(hooks=[publisher]) as s:
                    for _ in range(5):
                        s.run(model.train_op)
    theirs, ours = graph_nodes(tmp_path / "tf"), graph_nodes(tmp_path / "ours" / "train")
    assert "loss" in theirs
    assert theirs - {n for n in theirs if n.startswith("loss_1")} <= ours  # every TF node (bar its summary op)
    assert "hookbus_step_after" in ours
    files = sorted((tmp_path / "ours" / "train").glob("events.*"))
    events = [e for f in files for e in tf.compat.v1.train.summary_iterator(str(f))]
    assert sum(1 for e in events if e.graph_def) == 1
