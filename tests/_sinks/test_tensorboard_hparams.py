"""TensorBoardSink(hparams=...): one HParams session at the logdir's root, over its training and
evaluation runs, ended with the run's status; read as TensorBoard's HParams dashboard reads it.

Beside ``hp.KerasCallback`` + Keras's ``TensorBoard`` on the same fit, through the HParams plugin's
own handlers and through a real ``tensorboard`` server's HParams API. The dashboard takes the
directories *below* its ``--logdir`` as sessions, as HParams users lay them out
(``runs/<trial>``): each logdir here is ``<parent>/trial``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _hparams_view import Session, columns, plugin_view, served_view, sessions
from _keras_data import KERAS_NP_ARRAY
from _tb import rust_data_server_or_skip

import hookbus
from hookbus.sinks import TensorBoardSink
from hookbus.testing import FakeClock, ScriptedPublisher

HParams = dict[str, bool | int | float | str]
HP: HParams = {"lr": 0.1, "units": 8, "optimizer": "sgd", "batch_norm": False}
SESSION_FILES = "events.out.tfevents.*.hookbus-hparams"


def _one_session(parent: Path) -> Session:
    (session,) = sessions(plugin_view(parent)[1])
    return session


def _start_time(parent: Path) -> float:
    (group,) = plugin_view(parent)[1]["sessionGroups"]
    (session,) = group["sessions"]
    return float(session["startTimeSecs"])


# -- beside hp.KerasCallback on the same Keras fit -----------------------------------------------


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One seeded fit with validation, 2 epochs of 4 steps, under Keras's ``TensorBoard`` and
    ``hp.KerasCallback`` (``keras/trial``), ``TensorBoardSink(layout="keras", hparams=HP)``
    (``hookbus/trial``) and ``TensorBoardSink(every_n_steps=1, hparams=HP)`` (``default/trial``)."""
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    from _keras_data import classifier, data
    from tensorboard.plugins.hparams import api as hp

    root = tmp_path_factory.mktemp("hparams")
    keras.backend.clear_session()
    model = classifier(keras.optimizers.SGD(0.1), ["accuracy"])
    bus = hookbus.EventBus()
    bus.attach(TensorBoardSink(root / "hookbus" / "trial", layout="keras", hparams=HP))
    bus.attach(TensorBoardSink(root / "default" / "trial", every_n_steps=1, hparams=HP, name="Default"))
    theirs = str(root / "keras" / "trial")
    callbacks = [keras.callbacks.TensorBoard(theirs, write_graph=False), hp.KerasCallback(theirs, HP)]
    callbacks.append(hookbus.EventBusCallback(bus, ["loss", "accuracy"]))
    with bus:
        model.fit(*data(64, 0), validation_data=data(32, 1), epochs=2, batch_size=16, verbose=0, callbacks=callbacks)
    return root


@KERAS_NP_ARRAY
def test_the_keras_layouts_session_is_hp_keras_callbacks_as_the_hparams_plugin_reads_it(fitted: Path) -> None:
    """Issue 47, item 2: the same hyper-parameter and metric columns (validation included), the
    same values at the end and the same status as hp.KerasCallback beside Keras's TensorBoard."""
    theirs_experiment, theirs_groups = plugin_view(fitted / "keras")
    ours_experiment, ours_groups = plugin_view(fitted / "hookbus")
    hparams, metrics = columns(theirs_experiment)
    assert hparams == {
        "lr": "DATA_TYPE_FLOAT64",
        "units": "DATA_TYPE_FLOAT64",
        "optimizer": "DATA_TYPE_STRING",
        "batch_norm": "DATA_TYPE_BOOL",
    }
    assert ("validation", "epoch_loss") in metrics
    assert ("train", "epoch_loss") in metrics
    assert columns(ours_experiment) == (hparams, metrics)
    (theirs,) = sessions(theirs_groups)
    (ours,) = sessions(ours_groups)
    assert theirs.status == "STATUS_SUCCESS"
    assert theirs.hparams == {**HP, "units": 8.0}
    assert sorted(theirs.metrics) == metrics
    assert ours.name == theirs.name == "trial"
    assert ours.group == theirs.group  # the group is named by the hyper-parameters, as hp names it
    assert ours.hparams == theirs.hparams
    assert ours.status == theirs.status
    assert sorted(ours.metrics) == sorted(theirs.metrics)
    for column, (step, value) in theirs.metrics.items():
        assert ours.metrics[column][0] == step, column
        assert ours.metrics[column][1] == pytest.approx(value, rel=1e-6), column


@KERAS_NP_ARRAY
def test_the_default_layouts_session_has_training_and_evaluation_columns_with_kerass_end_values(fitted: Path) -> None:
    """The default layout's runs are ``train`` and ``eval``: the columns are their tags, and the
    values at the end are Keras's last epoch's (the running mean at an epoch's last step is the
    epoch's value) and its last validation's."""
    experiment, groups = plugin_view(fitted / "default")
    hparams, metrics = columns(experiment)
    assert hparams == columns(plugin_view(fitted / "keras")[0])[0]
    assert metrics == [
        ("eval", "accuracy"),
        ("eval", "loss"),
        ("train", "accuracy"),
        ("train", "examples/sec"),  # beside the rate: fit's examples, and the time outside the steps
        ("train", "loss"),
        ("train", "outside_secs/step"),
        ("train", "steps/sec"),
    ]
    (ours,) = sessions(groups)
    (theirs,) = sessions(plugin_view(fitted / "keras")[1])
    assert (ours.hparams, ours.status, ours.group) == (theirs.hparams, theirs.status, theirs.group)
    for ours_column, theirs_column in [
        (("train", "loss"), ("train", "epoch_loss")),
        (("train", "accuracy"), ("train", "epoch_accuracy")),
        (("eval", "loss"), ("validation", "epoch_loss")),
        (("eval", "accuracy"), ("validation", "epoch_accuracy")),
    ]:
        assert ours.metrics[ours_column][0] == 8, ours_column
        assert ours.metrics[ours_column][1] == pytest.approx(theirs.metrics[theirs_column][1], rel=1e-6), ours_column


@KERAS_NP_ARRAY
@pytest.mark.subprocess
@pytest.mark.parametrize("loader", ["--load_fast=false", "--load_fast=true"])
def test_a_real_tensorboard_server_shows_the_same_sessions(fitted: Path, loader: str) -> None:
    """The HParams API of a tensorboard server on the three logdirs' parent (its Python loader,
    and its default Rust data server where it runs here): the sessions of hp.KerasCallback and of
    the keras layout alike, and each as the plugin's handlers read it."""
    if loader == "--load_fast=true":
        rust_data_server_or_skip()
    experiment, groups, log = served_view(fitted, [loader], ready=3)
    assert groups is not None, log[-3000:]
    served = {s.name: s for s in sessions(groups)}
    assert sorted(served) == ["default/trial", "hookbus/trial", "keras/trial"], log[-3000:]
    hparams, metrics = columns(experiment)
    assert hparams == columns(plugin_view(fitted / "keras")[0])[0]
    assert {("validation", "epoch_loss"), ("eval", "loss"), ("train", "epoch_loss"), ("train", "loss")} <= set(metrics)
    theirs, ours = served["keras/trial"], served["hookbus/trial"]
    assert theirs.status == ours.status == served["default/trial"].status == "STATUS_SUCCESS"
    assert theirs.hparams == ours.hparams == {**HP, "units": 8.0}
    assert sorted(ours.metrics) == sorted(theirs.metrics)
    assert ("validation", "epoch_loss") in ours.metrics
    for name in ("keras", "hookbus", "default"):
        (read,) = sessions(plugin_view(fitted / name)[1])
        got = served[f"{name}/trial"].metrics
        assert sorted(got) == sorted(read.metrics), name
        for column, (step, value) in read.metrics.items():
            assert got[column][0] == step, (name, column)
            assert got[column][1] == pytest.approx(value, rel=1e-6), (name, column)


# -- how the run ended, resumes and new trainings (scripted: no TensorFlow) -----------------------


def _train(logdir: Path, hparams: HParams, start: int, steps: int, *, wall: float = 1.7e9, **session: Any) -> None:
    """One run from the wall time ``wall``: a training session at ``start`` for ``steps`` steps,
    an evaluation at its end."""
    bus = hookbus.EventBus(clock=FakeClock(), wall_clock=FakeClock(wall, 0.25))
    bus.attach(TensorBoardSink(logdir, every_n_steps=1, hparams=hparams))
    train = ScriptedPublisher(bus, ["loss"])
    evaluate = ScriptedPublisher(bus, ["loss"], mode="eval")
    with bus:
        train.begin()
        evaluate.begin()
        train.session(start, **session)
        for _ in range(steps):
            if train.advance(lambda s: {"loss": float(s)}):
                break
        evaluate.evaluate({"loss": -float(train.step)}, step=train.step)
        train.end()


def test_a_step_that_raises_ends_the_session_as_a_failure_and_keeps_its_columns(tmp_path: Path) -> None:
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(TensorBoardSink(tmp_path / "trial", every_n_steps=1, hparams=HP))
    train = ScriptedPublisher(bus, ["loss"])

    def crash() -> None:
        with bus:
            train.begin()
            train.session(0)
            for step in range(1, 4):
                train.advance({"loss": float(step)})
            _ = 1 / 0

    with pytest.raises(ZeroDivisionError):
        crash()
    session = _one_session(tmp_path)
    assert session.status == "STATUS_FAILURE"
    assert session.hparams == {**HP, "units": 8.0}
    assert session.metrics[("train", "loss")] == (3, 3.0)


def test_a_stop_by_signal_ends_unknown_and_the_resume_is_the_same_session_ending_in_success(tmp_path: Path) -> None:
    """SIGTERM: stopped (resumable, neither a success nor a failure: STATUS_UNKNOWN, with its end
    time). The resume from the checkpoint at 4 is the same session (its start time, one session
    file), and the session ends with the resumed run's success, not the first end."""
    logdir = tmp_path / "trial"
    bus = hookbus.EventBus(clock=FakeClock(), wall_clock=FakeClock(1.7e9, 0.25))
    bus.attach(TensorBoardSink(logdir, every_n_steps=1, hparams=HP))
    train = ScriptedPublisher(bus, ["loss"])
    received: list[int] = []
    # `with bus:` hands the signal on to the program's handler once the run ended: here, a recorder.
    original = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        with bus:
            train.begin()
            train.session(0)
            for step in range(1, 10):
                if step == 6:
                    os.kill(os.getpid(), signal.SIGTERM)  # turned into a stop request by `with bus:`
                if train.advance({"loss": float(step)}):
                    break
            train.end()
    finally:
        signal.signal(signal.SIGTERM, original)
    assert received == [signal.SIGTERM]
    assert bus.stop_reason is not None
    stopped = plugin_view(tmp_path)[1]["sessionGroups"][0]["sessions"][0]
    assert stopped.get("status", "STATUS_UNKNOWN") == "STATUS_UNKNOWN"
    assert float(stopped["endTimeSecs"]) > 0  # it ended: an end was written, with no verdict
    started = float(stopped["startTimeSecs"])
    _train(logdir, HP, 4, 6, wall=1.8e9, restored=True)
    session = _one_session(tmp_path)
    assert session.status == "STATUS_SUCCESS"
    assert session.metrics[("train", "loss")] == (10, 10.0)
    assert session.metrics[("eval", "loss")] == (10, -10.0)
    assert _start_time(tmp_path) == started
    assert len(list(logdir.glob(SESSION_FILES))) == 1


def test_a_second_fit_going_on_from_its_step_is_the_same_session(tmp_path: Path) -> None:
    """A training whose first step is past 0 (a second ``fit`` of the same model) goes on: the
    session keeps its start time; its hyper-parameters are the latest run's."""
    _train(tmp_path / "trial", HP, 0, 4)
    started = _start_time(tmp_path)
    _train(tmp_path / "trial", {**HP, "lr": 0.01}, 4, 4, wall=1.8e9)
    session = _one_session(tmp_path)
    assert session.hparams["lr"] == 0.01
    assert session.metrics[("train", "loss")] == (8, 8.0)
    assert _start_time(tmp_path) == started


def test_a_new_training_from_step_0_in_the_same_logdir_replaces_the_session(tmp_path: Path) -> None:
    """A second training that starts from step 0 in the same logdir is a new session, shown with
    its own hyper-parameters and start (TensorBoard keeps a directory's first session start, so the
    first one is removed; its restart marker at step 1 replaces the old curves the same way)."""
    _train(tmp_path / "trial", HP, 0, 6)
    first = _start_time(tmp_path)
    _train(tmp_path / "trial", {**HP, "lr": 0.5}, 0, 3, wall=1.8e9)
    session = _one_session(tmp_path)
    assert session.hparams["lr"] == 0.5
    assert session.status == "STATUS_SUCCESS"
    assert session.metrics[("train", "loss")] == (3, 3.0)
    assert first < 1.8e9 < _start_time(tmp_path) < 1.8e9 + 10  # the second run's wall clock starts at 1.8e9
    assert len(list((tmp_path / "trial").glob(SESSION_FILES))) == 1


def test_an_evaluation_only_run_leaves_the_trainings_session(tmp_path: Path) -> None:
    """An evaluator (an eval publisher alone) writes its run and no session: the training's
    stays, with its status, and the new evaluation is its column's value."""
    _train(tmp_path / "trial", HP, 0, 4)
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(TensorBoardSink(tmp_path / "trial", hparams={"other": 1}))
    evaluate = ScriptedPublisher(bus, ["loss"], mode="eval")
    with bus:
        evaluate.begin()
        evaluate.evaluate({"loss": -40.0}, step=4)
        evaluate.end()
    session = _one_session(tmp_path)
    assert (session.hparams, session.status) == ({**HP, "units": 8.0}, "STATUS_SUCCESS")
    assert session.metrics[("eval", "loss")] == (4, -40.0)


def test_without_hparams_no_session_is_written(tmp_path: Path) -> None:
    _train(tmp_path / "trial", HP, 0, 2)
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(TensorBoardSink(tmp_path / "plain", every_n_steps=1))
    with bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}])
    assert not list((tmp_path / "plain").glob(SESSION_FILES))
    assert [s.name for s in sessions(plugin_view(tmp_path)[1])] == ["trial"]


# -- every publisher --------------------------------------------------------------------------


def test_a_tf1_hook_training_with_evaluations_is_one_session_and_a_raising_one_a_failure(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    from hookbus._cli._demo import build_linear_regression
    from hookbus.sinks import CheckpointSink

    with tf.Graph().as_default():
        m = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(CheckpointSink(str(tmp_path / "ckpt"), every_n_secs=None, keep=2))
        bus.attach(TensorBoardSink(tmp_path / "runs" / "done", every_n_steps=5, hparams=HP))
        train = hookbus.EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
        evaluate = hookbus.EventBusHook(bus, {"loss": m.eval_loss}, mode="eval")
        with bus:
            hookbus.train_and_evaluate(
                bus,
                train_op=m.train_op,
                eval_fetches=m.eval_loss,
                checkpoint_dir=str(tmp_path / "ckpt"),
                steps_per_round=5,
                train_hooks=[train],
                eval_hooks=[evaluate],
                eval_steps=1,
                max_rounds=2,
            )
    with tf.Graph().as_default():
        m = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(TensorBoardSink(tmp_path / "runs" / "raised", every_n_steps=1, hparams={**HP, "lr": 0.2}))
        hook = hookbus.EventBusHook(bus, {"loss": m.loss}, train_op=m.train_op)
        fails = tf.debugging.assert_equal(m.global_step, tf.constant(-1, m.global_step.dtype))

        def crash() -> None:
            with bus, hookbus.monitored_training_session(hooks=[hook]) as session:
                for _ in range(3):
                    session.run(m.train_op)
                session.run([m.train_op, fails])  # a step that raises

        with pytest.raises(tf.errors.InvalidArgumentError):
            crash()
    found = {s.name: s for s in sessions(plugin_view(tmp_path / "runs")[1])}
    assert sorted(found) == ["done", "raised"]
    assert found["done"].status == "STATUS_SUCCESS"
    assert sorted(found["done"].metrics) == [("eval", "loss"), ("train", "loss"), ("train", "steps/sec")]
    assert found["done"].metrics[("eval", "loss")][0] == 10
    assert found["raised"].status == "STATUS_FAILURE"
    assert found["raised"].hparams["lr"] == 0.2
    assert found["raised"].metrics[("train", "loss")][0] == 3


def test_a_loop_publishers_training_with_evaluations_is_one_session(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    bus = hookbus.EventBus()
    bus.attach(TensorBoardSink(tmp_path / "trial", every_n_steps=2, hparams=HP))
    counter = tf.Variable(0, dtype=tf.int64)
    with bus, hookbus.LoopPublisher(bus, ["loss"], eval_keys=["loss"], step_counter=counter) as loop:
        for _ in range(4):
            counter.assign_add(1)
            loop.step({"loss": float(counter.numpy())})
        loop.evaluate({"loss": 0.5})
    session = _one_session(tmp_path)
    assert session.status == "STATUS_SUCCESS"
    assert session.metrics == {
        ("train", "loss"): (4, 4.0),
        ("eval", "loss"): (4, 0.5),
        ("train", "steps/sec"): (4, session.metrics[("train", "steps/sec")][1]),
        ("train", "outside_secs/step"): (4, session.metrics[("train", "outside_secs/step")][1]),
    }


# -- a kill and a resume -------------------------------------------------------------------------


@pytest.mark.subprocess
def test_a_killed_keras_fit_resumed_from_its_checkpoint_is_one_session(tmp_path: Path) -> None:
    """SIGKILL after the checkpoint at step 8 (no end written), then the same script resumes and
    finishes: one session in both layouts, with the first process's start time and a success."""
    child = [sys.executable, str(Path(__file__).with_name("_hparams_child.py")), str(tmp_path)]
    killed = subprocess.run([*child, "8"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    started = {layout: _start_time(tmp_path / layout) for layout in ("default", "keras")}
    assert _one_session(tmp_path / "default").status == "STATUS_UNKNOWN"  # no end: it never said
    done = subprocess.run(child, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resumed at step 8" in done.stdout
    for layout in ("default", "keras"):
        session = _one_session(tmp_path / layout)
        assert session.status == "STATUS_SUCCESS", layout
        assert session.hparams == {**HP, "units": 8.0}, layout
        assert _start_time(tmp_path / layout) == started[layout], layout
        assert len(list((tmp_path / layout / "trial").glob(SESSION_FILES))) == 1, layout
    assert _one_session(tmp_path / "default").metrics[("eval", "loss")][0] == 12
    assert _one_session(tmp_path / "keras").metrics[("validation", "epoch_loss")][0] == 2


# -- bad values ---------------------------------------------------------------------------------


@pytest.mark.parametrize("hparams", [{"lr": [0.1]}, {"lr": None}, {1: 0.1}, [("lr", 0.1)]])
def test_bad_hparams_fail_at_construction_naming_the_value(tmp_path: Path, hparams: Any) -> None:
    with pytest.raises(ValueError, match=r"hparams must map names to bool, int, float or str \(got "):
        TensorBoardSink(tmp_path, hparams=hparams)
