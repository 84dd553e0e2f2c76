"""ExportSink: the best (or final) model for serving, beside Keras's ``ModelCheckpoint(save_best_only=True)``,
from the TF1 hook and the loop publisher, once across kills; the bookkeeping on a scripted bus."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _file_export import scale_module, scripted
from _keras_data import KERAS_NP_ARRAY, classifier, data

import hookbus
from hookbus.sink_api import ModelExported
from hookbus.sinks import ExportSink
from hookbus.testing import ScriptedPublisher

CHILD = Path(__file__).with_name("_export_child.py")


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != ".export.lock")


# -- the bookkeeping, on a scripted bus (no TensorFlow) ----------------------------------------------
def test_improvements_export_by_keras_rule_and_appear_at_the_flush_keeping_the_newest(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    sink = bus.attach(ExportSink(tmp_path / "export", monitor="eval/loss", keep=2))
    train, evaluation, export = scripted(bus)
    train.begin()
    train.session(0)
    for step, value in enumerate([3.0, 2.0, 2.0, float("nan"), 1.0, 1.5], start=1):
        train.advance({"loss": 0.0})
        evaluation.evaluate({"loss": value}, step=step)
    # Strictly better only (the tie at step 3 keeps step 2's), never a NaN: written beside their target.
    assert export.written == [1, 2, 5]
    assert listing(tmp_path / "export") == [".tmp-1.keras", ".tmp-2.keras", ".tmp-5.keras"]
    assert sink.latest is None
    train.end()  # the session's end flushes: into place, the newest two kept
    assert listing(tmp_path / "export") == ["2.keras", "5.keras"]
    assert sink.latest == str(tmp_path / "export" / "5.keras")
    assert (sink.best, sink.best_step) == (1.0, 5)
    assert sink.state_dict() == {"best": 1.0, "best_step": 5}
    bus.close()


def test_each_flush_that_moves_exports_into_place_announces_the_newest(tmp_path: Path) -> None:
    """``model_exported`` (for a sink that ships the model on, MLflowSink(log_model=True)): once per
    flush that moved something, for the newest export, which is in place when it is published."""
    bus = hookbus.EventBus()
    sink = bus.attach(ExportSink(tmp_path / "export", monitor="eval/loss", keep=1))
    announced: list[tuple[ModelExported, bool]] = []
    bus.on("model_exported", lambda e: announced.append((e, os.path.isfile(e.path))))
    train, evaluation, _ = scripted(bus)
    train.begin()
    train.session(0)
    for step, value in enumerate([3.0, 2.0], start=1):
        train.advance({"loss": 0.0})
        evaluation.evaluate({"loss": value}, step=step)
    assert announced == []  # written, not yet in place
    sink.flush()  # as the checkpoint barrier flushes it
    sink.flush()  # nothing moved: nothing announced
    train.advance({"loss": 0.0})
    evaluation.evaluate({"loss": 1.0}, step=3)
    train.end()
    assert announced == [
        (ModelExported(str(tmp_path / "export" / "2.keras"), 2, "a test file"), True),
        (ModelExported(str(tmp_path / "export" / "3.keras"), 3, "a test file"), True),
    ]
    bus.close()


def test_a_resume_removes_later_exports_and_leftovers_and_continues_from_the_restored_best(tmp_path: Path) -> None:
    directory = tmp_path / "export"
    directory.mkdir()
    for name in ("2.keras", "4.keras", "7.keras", ".tmp-8.keras"):  # 7 and 8: after the checkpoint of step 4
        (directory / name).write_text(name)
    bus = hookbus.EventBus()
    sink = bus.attach(ExportSink(directory, monitor="eval/loss"))
    train, evaluation, export = scripted(bus)
    train.begin()
    assert listing(directory) == ["2.keras", "4.keras", "7.keras"]  # a killed process's staged export
    sink.load_state_dict({"best": 0.5, "best_step": 4})  # as the checkpoint sink loads it
    train.session(4, restored=True)
    assert listing(directory) == ["2.keras", "4.keras"]
    for step, value in [(5, 0.5), (6, 0.7), (7, 0.4)]:
        train.advance({"loss": 0.0}, step=step)
        evaluation.evaluate({"loss": value}, step=step)
    train.end()
    assert export.written == [7]  # the tie with the restored best does not export
    assert listing(directory) == ["2.keras", "4.keras", "7.keras"]
    assert (directory / "7.keras").read_text() == "7"
    bus.close()


def test_without_a_monitor_the_final_model_is_exported_at_the_end_and_a_step_only_once(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    bus.attach(ExportSink(tmp_path / "export"))
    train, _, export = scripted(bus)
    train.run([{"loss": 1.0}] * 3)
    assert listing(tmp_path / "export") == ["3.keras"]
    train.run([], start=3)  # a restart at the step of the export: trains nothing, exports nothing again
    assert export.written == [3]
    assert train.fetched == []  # it asks no publisher for anything on a step
    bus.close()


def test_a_run_that_raises_leaves_no_export_of_steps_no_barrier_flushed(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    bus.attach(ExportSink(tmp_path / "export", monitor="eval/loss"))
    train, evaluation, _ = scripted(bus)

    def train_then_raise() -> None:
        with bus:
            train.begin()
            train.session(0)
            train.advance({"loss": 0.0})
            evaluation.evaluate({"loss": 1.0}, step=1)
            assert listing(tmp_path / "export") == [".tmp-1.keras"]
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        train_then_raise()
    assert listing(tmp_path / "export") == []


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: ExportSink(3), r"^directory must be a non-empty str or os.PathLike \(got 3\)"),  # type: ignore[arg-type]
        (lambda t: ExportSink(t / "f"), r"^directory must be a directory, but '.*f' is an existing file"),
        (lambda t: ExportSink(t, monitor="eval/loss", mode="up"), r"^mode must be 'min', 'max' or 'auto' \(got 'up'\)"),
        (lambda t: ExportSink(t, monitor=""), r"^monitor must be a non-empty key or None \(got ''\)"),
        (lambda t: ExportSink(t, keep=0), r"^keep must be a positive int \(got 0\)"),
        (lambda t: ExportSink(t, every_n_steps=5), r"^every_n_steps and every_n_secs say when a training key"),
    ],
    ids=["path type", "a file", "mode", "empty monitor", "keep", "a schedule without monitor"],
)
def test_bad_arguments_fail_at_construction(tmp_path: Path, make: Any, message: str) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match=message):
        make(tmp_path)


def test_a_publisher_that_offers_no_export_fails_before_step_1_naming_what_to_pass(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    bus.attach(ExportSink(tmp_path / "export"))
    with pytest.raises(ValueError, match=r"ExportSink needs a training publisher that can write its model") as error:
        ScriptedPublisher(bus, ["loss"]).begin()
    assert "EventBusHook(..., serving_inputs=" in str(error.value)
    assert "LoopPublisher(..., serving=" in str(error.value)
    assert not (tmp_path / "export").exists()


def test_a_training_key_outside_fit_needs_a_schedule_and_keras_names_get_the_bus_name(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    bus.attach(ExportSink(tmp_path / "a", monitor="loss"))
    train, _, _ = scripted(bus)
    with pytest.raises(ValueError, match=r"monitors the training key 'loss', compared outside Keras fit on a sched"):
        train.begin()
    bus = hookbus.EventBus()
    bus.attach(ExportSink(tmp_path / "b", monitor="val_loss"))
    train, _, _ = scripted(bus)
    with pytest.raises(hookbus.UnknownKeyError, match=r"Keras's 'val_loss' is 'eval/loss' on the bus"):
        train.begin()


# -- Keras fit, beside ModelCheckpoint(save_best_only=True) ------------------------------------------
def _held_out() -> Any:
    return data(50, 7)[0]


def _predict(path: Path | str) -> Any:
    keras = pytest.importorskip("keras")
    keras.backend.clear_session()
    return keras.models.load_model(path).predict(_held_out(), verbose=0)


@KERAS_NP_ARRAY
@pytest.mark.parametrize(
    ("rate", "saved"),
    [(0.05, [1, 2, 3]), (0.0, [1])],
    ids=["the best epoch is not the last", "ties: the first best is kept"],
)
def test_the_best_exports_are_keras_best_only_files_and_predict_the_same(
    tmp_path: Path, rate: float, saved: list[int]
) -> None:
    keras = pytest.importorskip("keras")
    model = classifier(keras.optimizers.Adam(rate) if rate else keras.optimizers.SGD(0.0))
    bus = hookbus.EventBus()
    sink = bus.attach(ExportSink(tmp_path / "ours", monitor="eval/loss"))
    theirs = keras.callbacks.ModelCheckpoint(
        str(tmp_path / "keras" / "e{epoch}.keras"), "val_loss", save_best_only=True
    )
    epochs, steps = 6, 4
    history = model.fit(
        *data(steps * 32, 0),
        batch_size=32,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        validation_data=data(64, 1),
        callbacks=[theirs, hookbus.EventBusCallback(bus)],
    )
    losses = history.history["val_loss"]
    if rate:  # the setting is what the case says: the validation loss turns up after its best
        assert int(np.argmin(losses)) + 1 == saved[-1] < epochs
    else:
        assert len(set(losses)) == 1  # nothing trains: every epoch ties with the first
    assert sorted(p.name for p in (tmp_path / "keras").iterdir()) == [f"e{e}.keras" for e in saved]
    assert listing(tmp_path / "ours") == sorted(f"{e * steps}.keras" for e in saved)
    assert sink.latest == str(tmp_path / "ours" / f"{saved[-1] * steps}.keras")
    for epoch in saved:
        mine = _predict(tmp_path / "ours" / f"{epoch * steps}.keras")
        np.testing.assert_allclose(mine, _predict(tmp_path / "keras" / f"e{epoch}.keras"), rtol=0, atol=0)
    # The loaded file is the model as it was at its epoch, not a later one.
    if rate:
        assert not np.allclose(_predict(sink.latest), model.predict(_held_out(), verbose=0))


@KERAS_NP_ARRAY
def test_under_fit_without_a_monitor_the_final_model_is_exported_once_at_the_end(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    model = classifier(keras.optimizers.Adam(0.05))
    bus = hookbus.EventBus()
    bus.attach(ExportSink(tmp_path / "export"))
    seen: list[list[str]] = []

    class Look(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            seen.append(listing(tmp_path / "export"))

    model.fit(*data(128, 0), batch_size=32, epochs=3, verbose=0, callbacks=[hookbus.EventBusCallback(bus), Look()])
    assert seen == [[], [], []]
    assert listing(tmp_path / "export") == ["12.keras"]
    expected = model.predict(_held_out(), verbose=0)
    np.testing.assert_allclose(_predict(tmp_path / "export" / "12.keras"), expected, rtol=0, atol=0)


# -- the TF1 hook: a SavedModel with a serving signature -----------------------------------------
def test_the_tf1_hook_exports_a_saved_model_whose_serving_signature_is_the_graph(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    probe = np.array([[1.0, 2.0], [-1.0, 0.5]], dtype=np.float32)
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    by_step: dict[int, Any] = {}
    losses: list[tuple[int, float]] = []
    with graph.as_default():
        tf.compat.v1.train.get_or_create_global_step()
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        target = tf.compat.v1.placeholder(tf.float32, [None, 1], name="target")
        kernel = tf.compat.v1.get_variable("kernel", [2, 1], initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(x, kernel, name="y")
        loss = tf.reduce_mean(tf.square(y - target))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step()
        )
        bus = hookbus.EventBus()
        final = bus.attach(ExportSink(tmp_path / "final"))
        bus.attach(ExportSink(tmp_path / "best", monitor="loss", every_n_steps=1, keep=100, name="Best"))
        bus.on("after_run", lambda e: losses.append((e.step, e.values["loss"])), keys="loss")
        hook = hookbus.EventBusHook(
            bus, {"loss": loss}, train_op=train_op, serving_inputs={"x": x}, serving_outputs={"y": "y:0"}
        )
        with bus, hookbus.monitored_training_session(hooks=[hook]) as session:
            for step in range(1, 9):
                batch = rng.normal(size=(8, 2)).astype(np.float32)
                labels = batch @ np.array([[2.0], [-1.0]], np.float32) + rng.normal(scale=2.0, size=(8, 1))
                session.run(train_op, {x: batch, target: labels.astype(np.float32)})
                by_step[step] = session.run(y, {x: probe})
    assert listing(tmp_path / "final") == ["8"]
    loaded = tf.saved_model.load(final.latest)
    serving = loaded.signatures["serving_default"]
    assert sorted(serving.structured_outputs) == ["y"]
    np.testing.assert_allclose(serving(x=tf.constant(probe))["y"].numpy(), by_step[8], rtol=1e-6)
    improved: list[int] = []
    low = float("inf")
    for step, value in losses:
        if value < low:
            improved.append(step)
            low = value
    assert 1 < len(improved) < 8  # noisy batches: some steps do not improve
    assert listing(tmp_path / "best") == sorted(str(s) for s in improved)
    for step in improved:
        exported = tf.saved_model.load(str(tmp_path / "best" / str(step))).signatures["serving_default"]
        np.testing.assert_allclose(exported(x=tf.constant(probe))["y"].numpy(), by_step[step], rtol=1e-6)


def test_the_hook_checks_its_serving_arguments(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        y = tf.identity(x, name="y")
        bus = hookbus.EventBus()
        with pytest.raises(ValueError, match=r"^serving_inputs is given without serving_outputs"):
            hookbus.EventBusHook(bus, serving_inputs={"x": x})
        with pytest.raises(TypeError, match=r"^serving_outputs\['y'\] must be a tensor or a tensor name"):
            hookbus.EventBusHook(bus, serving_inputs={"x": x}, serving_outputs={"y": 3})
        with pytest.raises(ValueError, match=r"take mode='train'"):
            hookbus.EventBusHook(bus, mode="eval", serving_inputs={"x": x}, serving_outputs={"y": y})
        hook = hookbus.EventBusHook(bus, serving_inputs={"x": x}, serving_outputs={"y": "yy:0"})
        with pytest.raises(ValueError, match=r"serving_outputs\['y'\] 'yy:0' is not in the graph; did you mean"):
            hook.begin()


# -- the loop publisher ---------------------------------------------------------------------------
def test_the_loop_exports_a_modules_saved_model_at_each_best_evaluation(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")

    module = scale_module()
    bus = hookbus.EventBus()
    sink = bus.attach(ExportSink(tmp_path / "export", monitor="eval/loss"))
    loop = hookbus.LoopPublisher(bus, ["loss"], eval_keys=["loss"], serving=module)
    with bus, loop:
        for step, value in enumerate([3.0, 2.0, 2.0, 1.0, 4.0], start=1):
            module.w.assign(float(step))
            loop.step({"loss": value})
            loop.evaluate({"loss": value})
    assert listing(tmp_path / "export") == ["1", "2", "4"]
    assert sink.latest == str(tmp_path / "export" / "4")
    for step in (1, 2, 4):
        serving = tf.saved_model.load(str(tmp_path / "export" / str(step))).signatures["serving_default"]
        assert serving(x=tf.constant([1.0, 2.0]))["y"].numpy().tolist() == [step, 2 * step]


@KERAS_NP_ARRAY
def test_the_loop_exports_a_keras_model_as_a_keras_file(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    model = classifier(keras.optimizers.SGD(0.1))
    bus = hookbus.EventBus()
    bus.attach(ExportSink(tmp_path / "export"))
    x, y = data(32, 0)
    with bus, hookbus.LoopPublisher(bus, ["loss"], serving=model) as loop:
        for _ in range(3):
            loop.step({"loss": model.train_on_batch(x, y)})
    assert listing(tmp_path / "export") == ["3.keras"]
    np.testing.assert_allclose(_predict(tmp_path / "export" / "3.keras"), model.predict(_held_out(), verbose=0))


def test_the_loop_refuses_what_it_cannot_serve() -> None:
    tf = pytest.importorskip("tensorflow")
    with pytest.raises(TypeError, match=r"^serving must be a Keras model .* or None \(got 3\)"):
        hookbus.LoopPublisher(hookbus.EventBus(), ["loss"], serving=3)
    with pytest.raises(TypeError, match=r"needs exactly one tf.function with an input_signature.*with none"):
        hookbus.LoopPublisher(hookbus.EventBus(), ["loss"], serving=tf.Module())


# -- kills: once through the barrier ------------------------------------------------------------
def run_child(directory: Path, kill: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOOKBUS_TEST_KILL": kill, "TF_CPP_MIN_LOG_LEVEL": "2"}
    argv = [sys.executable, str(CHILD), str(directory)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, check=False)


@pytest.mark.subprocess
def test_kills_and_resumes_export_each_improvement_once_and_leave_the_best(tmp_path: Path) -> None:
    # Killed as epoch 1's checkpoint is saved (its export written, not in place), then after epoch 3's end.
    for kill in ("saving:1", "epoch_end:3"):
        result = run_child(tmp_path, kill)
        assert result.returncode == -signal.SIGKILL, (kill, result.stderr[-3000:])
        if kill == "saving:1":  # the kill came between the export's write and its move into place
            assert ".tmp-8.keras" in listing(tmp_path / "export")
    final = run_child(tmp_path)
    assert final.returncode == 0, final.stderr[-3000:]
    # The run's evaluations as the finished training has them (a step trained again: its last).
    evaluations: dict[int, float] = {}
    for line in (tmp_path / "evals.txt").read_text().splitlines():
        at, value = line.split()
        evaluations[int(at)] = float(value)
    improved: list[int] = []
    low = float("inf")
    for step in sorted(evaluations):
        if evaluations[step] < low:
            improved.append(step)
            low = evaluations[step]
    assert 1 < len(improved) < len(evaluations)  # Adam 0.05 overfits: the best is not the last epoch
    exported = [
        int(line.split()[3]) for line in (tmp_path / "log.txt").read_text().splitlines() if " exported step " in line
    ]
    assert sorted(exported) == improved  # each improvement moved into place once, over all the processes
    assert listing(tmp_path / "export") == sorted(f"{s}.keras" for s in improved)  # no leftover .tmp-
    keras = pytest.importorskip("keras")
    best = keras.models.load_model(tmp_path / "export" / f"{improved[-1]}.keras")
    np.testing.assert_allclose(best.evaluate(*data(64, 1), verbose=0), low, rtol=1e-5)
