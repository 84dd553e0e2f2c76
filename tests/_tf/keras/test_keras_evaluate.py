"""Evaluations outside training (issue 47 item 1): ``model.evaluate`` under ``EventBusCallback`` after,
between or without ``fit``, inside or outside ``with bus:``, is a test evaluation, published once as
``test/<name>`` at the training step; ``predict`` publishes nothing.

Differential: the same seeded fit and evaluate under Keras's own ``TensorBoard`` and ``CSVLogger`` and
under hookbus's sinks, compared as the next tool reads them (``EventAccumulator`` lists of
``(step, value)`` with every point kept, the CSV rows); and each output's own promise (its own CSV
file and TensorBoard run, no restart marker, no validation row replaced).
"""

from __future__ import annotations

import csv
import gc
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
from _keras_data import KERAS_NP_ARRAY, classifier, data, keras_np_array_ignored  # noqa: E402
from _tb import check_served, rust_data_server_or_skip, serve_and_read  # noqa: E402
from rich.console import Console  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator, event_file_loader  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

import hookbus  # noqa: E402
from hookbus.sinks import (  # noqa: E402
    CheckpointSink,
    ConsoleSink,
    CSVSink,
    EarlyStoppingSink,
    EventLogSink,
    ExportSink,
    NanGuardSink,
    ReduceLROnPlateauSink,
    StopAtStepSink,
    TensorBoardSink,
)

TRAIN, VAL, TEST = data(64, 0), data(32, 1), data(32, 2)
KEYS = ["loss", "accuracy"]
EPOCHS, BATCH = 2, 16  # 4 steps an epoch: validation at steps 4 and 8

#: One tag's points as the next tool reads them, in the order written: (step, value).
Points = list[tuple[int, float]]


def model() -> Any:
    keras.backend.clear_session()
    return classifier(keras.optimizers.SGD(0.1, name="sgd"), ["accuracy"])


def fit(m: Any, callbacks: list[Any]) -> Any:
    return m.fit(*TRAIN, validation_data=VAL, epochs=EPOCHS, batch_size=BATCH, verbose=0, callbacks=callbacks)


def evaluate(m: Any, callbacks: list[Any]) -> dict[str, float]:
    result: dict[str, float] = m.evaluate(*TEST, batch_size=BATCH, verbose=0, callbacks=callbacks, return_dict=True)
    return result


def tensors(directory: Path) -> dict[str, Points]:
    """Every tensor summary of a run directory, by tag: all points in order (repeats of a step kept)."""
    acc = event_accumulator.EventAccumulator(str(directory), size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    found: dict[str, Points] = {}
    for tag in acc.Tags()["tensors"]:
        for e in acc.Tensors(tag):
            value = tensor_util.make_ndarray(e.tensor_proto)
            if value.dtype.kind == "f" and value.ndim == 0:
                found.setdefault(tag, []).append((e.step, float(value)))
    return found


def scalars(directory: Path) -> dict[str, Points]:
    """The default layout's scalars of a run directory, as the legacy reader keeps them (a restart
    marker purges what came after its step)."""
    acc = event_accumulator.EventAccumulator(str(directory))
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def session_markers(directory: Path) -> list[int]:
    """The steps of the restart (``SessionLog.START``) markers in a run directory's event files."""
    steps = []
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for event in event_file_loader.LegacyEventFileLoader(str(path)).Load():
            if event.HasField("session_log"):
                steps.append(event.step)
    return steps


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def assert_same_points(theirs: dict[str, Points], ours: dict[str, Points]) -> None:
    """Every tag's points equal, in step order. (Keras's writers make one event file per writer and
    evaluate, named by the second and a process-wide counter; TensorBoard reads a directory's files
    in name order, so Keras's own files of one second may be read out of step order: ``...9.v2``
    after ``...10.v2``.)"""
    assert sorted(ours) == sorted(theirs)
    for tag, points in theirs.items():
        mine, keras_points = sorted(ours[tag]), sorted(points)
        assert [s for s, _ in mine] == [s for s, _ in keras_points], tag
        np.testing.assert_allclose([v for _, v in mine], [v for _, v in keras_points], rtol=1e-6, err_msg=tag)


class Keras:
    """Keras's own callbacks on a run: TensorBoard (no graph) and CSVLogger."""

    def __init__(self, root: Path) -> None:
        self.logdir, self.csv = root / "keras-tb", root / "keras.csv"
        self.tensorboard = keras.callbacks.TensorBoard(str(self.logdir), write_graph=False)
        self.logger = keras.callbacks.CSVLogger(str(self.csv))

    @property
    def fit_callbacks(self) -> list[Any]:
        return [self.tensorboard, self.logger]

    def close(self, m: Any) -> None:
        """Keras's TensorBoard keeps an evaluate's writer open: dropping it (``set_model`` makes new
        ones) flushes and closes it, as the end of the process would."""
        self.tensorboard.set_model(m)
        gc.collect()


class Ours:
    """hookbus's sinks on a run: TensorBoard in both layouts, CSV by step and by epoch, the event log."""

    def __init__(self, root: Path, *extra: hookbus.sink_api.Sink, keras_layout: bool = True) -> None:
        self.root = root
        self.bus = hookbus.EventBus()
        self.keras_tb, self.tb = root / "tb-keras", root / "tb"
        self.csv, self.epochs = root / "metrics.csv", root / "epochs.csv"
        self.log = root / "events.jsonl"
        self.screen = io.StringIO()  # the dashboard's plain lines and summaries
        for sink in (
            ConsoleSink(console=Console(file=self.screen, width=120), live=False, run_name="fit"),
            *([TensorBoardSink(self.keras_tb, layout="keras")] if keras_layout else []),
            TensorBoardSink(self.tb, every_n_steps=1),
            CSVSink(self.csv, every_n_steps=1),
            CSVSink(self.epochs, epochs=True),
            EventLogSink(self.log),
            *extra,
        ):
            self.bus.attach(sink)
        self.callback = hookbus.EventBusCallback(self.bus, KEYS)

    @property
    def test_csv(self) -> Path:
        return self.root / "metrics.test.csv"

    @property
    def eval_csv(self) -> Path:
        return self.root / "metrics.eval.csv"


def keras_epoch_rows(path: Path) -> list[dict[str, float]]:
    return [{k: float(v) for k, v in row.items()} for row in rows(path)]


def assert_training_outputs_kept(keras_run: Keras, ours: Ours, fits: int = 1) -> None:
    """What training wrote is intact after the evaluation: CSVLogger's rows equal the epoch CSV's,
    the validation rows are CSVLogger's val_* values at each epoch's last step (nothing replaced),
    the default layout's eval curve keeps every point, and no evaluation wrote a restart marker."""
    theirs = keras_epoch_rows(keras_run.csv)
    ours_epochs = [{k: float(v) for k, v in row.items() if k not in ("step", "wall_time")} for row in rows(ours.epochs)]
    assert len(theirs) == EPOCHS  # CSVLogger's file holds the last fit's epochs; ours each fit's of the run
    assert len(ours_epochs) == EPOCHS * fits
    for mine, keras_row in zip(ours_epochs[-EPOCHS:], theirs, strict=True):
        assert mine == pytest.approx(keras_row, rel=1e-6)
    validation = rows(ours.eval_csv)
    steps = [4 * (e + 1) for e in range(EPOCHS * fits)]
    assert [int(r["step"]) for r in validation] == steps
    last_fit = validation[-EPOCHS:]
    assert [float(r["loss"]) for r in last_fit] == pytest.approx([r["val_loss"] for r in theirs], rel=1e-6)
    eval_curve = scalars(ours.tb / "eval")["loss"]
    assert [s for s, _ in eval_curve] == steps
    assert [v for _, v in eval_curve] == pytest.approx([float(r["loss"]) for r in validation])
    assert session_markers(ours.tb / "eval") == [1 + 8 * i for i in range(fits)]  # training's sessions only


def assert_test_outputs(ours: Ours, results: list[tuple[int, dict[str, float]]]) -> None:
    """Each evaluation once, at its training step: a row of the test CSV and a point of the default
    layout's ``test`` run (no marker in it), never in the training or validation files."""
    tested = rows(ours.test_csv)
    assert [int(r["step"]) for r in tested] == [step for step, _ in results]
    for row, (_, result) in zip(tested, results, strict=True):
        assert {k: float(row[k]) for k in KEYS} == pytest.approx({k: result[k] for k in KEYS}, rel=1e-6)
    test_run = scalars(ours.tb / "test")
    for key in KEYS:
        assert [s for s, _ in test_run[key]] == [step for step, _ in results]
        assert [v for _, v in test_run[key]] == pytest.approx([result[key] for _, result in results], rel=1e-6)
    assert session_markers(ours.tb / "test") == []
    if ours.csv.exists():  # a training's file: no test column
        assert "test/loss" not in rows(ours.csv)[0]
        assert "test/loss" not in scalars(ours.tb / "train")


# -- evaluate after fit, inside and outside `with bus:` ------------------------------------------
@pytest.fixture(scope="module")
def keras_fit_then_evaluate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Keras, dict[str, float]]:
    """Keras's own outputs of the seeded fit then evaluate (its TensorBoard and CSVLogger, in a
    directory of their own, read only by the tests) and the evaluation's result: the same for each
    case below, so one run stands for them all."""
    keras_run = Keras(tmp_path_factory.mktemp("keras-fit-then-evaluate"))
    with keras_np_array_ignored():
        m = model()
        fit(m, keras_run.fit_callbacks)
        expected = evaluate(m, [keras_run.tensorboard])
        keras_run.close(m)
    return keras_run, expected


@KERAS_NP_ARRAY
@pytest.mark.parametrize("keras_layout", [True, False], ids=["with-keras-layout", "default-layout-only"])
@pytest.mark.parametrize("where", ["inside", "after"])
def test_an_evaluate_after_fit_is_what_kerass_tensorboard_and_csv_logger_leave(
    tmp_path: Path, keras_fit_then_evaluate: tuple[Keras, dict[str, float]], where: str, keras_layout: bool
) -> None:
    """The same seeded fit (with validation_data) then evaluate on a test set: under layout="keras" the
    validation run's tags, steps and values equal Keras's TensorBoard's, the test evaluation's
    ``evaluation_<name>_vs_iterations`` point at the training step included and the validation curve
    whole; the CSV's training and validation rows equal CSVLogger's after it (nothing replaced); the
    test CSV holds the test values at the training step. On 19d8f43, inside the block the keras
    layout raised and the test reached no sink; after it, it replaced the last validation row and
    purged the eval curve to one point (each checked without the keras layout too, which raised first)."""
    keras_run, expected = keras_fit_then_evaluate
    ours = Ours(tmp_path / "hookbus", keras_layout=keras_layout)
    m = model()
    with ours.bus:
        fit(m, [ours.callback])
        if where == "inside":
            result = evaluate(m, [ours.callback])
    if where == "after":
        result = evaluate(m, [ours.callback])
    ours.bus.close()
    assert result == pytest.approx(expected, rel=1e-6)

    if keras_layout:
        theirs_validation = tensors(keras_run.logdir / "validation")
        assert sorted(s for s, _ in theirs_validation["evaluation_loss_vs_iterations"]) == [4, 8, 8]  # val x2, test
        assert_same_points(theirs_validation, tensors(ours.keras_tb / "validation"))
        assert_same_points(tensors(keras_run.logdir / "train"), tensors(ours.keras_tb / "train"))
    assert_training_outputs_kept(keras_run, ours)
    assert_test_outputs(ours, [(8, result)])
    # The dashboard: a test line, the values in the summary, and the fit that completed is "finished"
    # (on 19d8f43 the keras layout's error ended the run "crashed").
    screen = ours.screen.getvalue()
    assert f"test at step 8 | test/loss {result['loss']:.4g}" in screen
    assert "fit: finished at step 8" in screen
    assert "crashed" not in screen


# -- what TensorBoard's servers show -------------------------------------------------------------
@pytest.fixture(scope="module")
def evaluated_after_the_block(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, str], Any]]:
    """A fit with validation, then an evaluate after ``with bus:``, in the default layout: the logdir and
    what a server must show (each run's loss by step)."""
    root = tmp_path_factory.mktemp("served")
    ours = Ours(root, keras_layout=False)
    m = model()
    with ours.bus:
        history = fit(m, [ours.callback])
    result = evaluate(m, [ours.callback])
    ours.bus.close()
    return ours.tb, {
        ("train", "loss"): {int(r["step"]): float(r["loss"]) for r in rows(ours.csv)},
        ("eval", "loss"): dict(zip([4, 8], history.history["val_loss"], strict=True)),  # Keras's own
        ("test", "loss"): {8: result["loss"]},
    }


@pytest.mark.subprocess
@KERAS_NP_ARRAY
def test_tensorboards_python_loader_shows_the_validation_curve_whole_and_the_test_point(
    evaluated_after_the_block: tuple[Path, dict[tuple[str, str], Any]],
) -> None:
    """``tensorboard --load_fast=false`` on the logdir: the eval run keeps both validation points, the
    test run has the evaluation at step 8. On 19d8f43 the evaluate's marker at step 1 in ``eval``
    purged the curve to the test value at step 8."""
    logdir, want = evaluated_after_the_block
    got, log = serve_and_read(logdir, ["--load_fast=false"], want)
    check_served(got, want, log)


@pytest.mark.subprocess
@KERAS_NP_ARRAY
def test_tensorboards_rust_data_server_shows_the_validation_curve_whole_and_the_test_point(
    evaluated_after_the_block: tuple[Path, dict[tuple[str, str], Any]],
) -> None:
    rust_data_server_or_skip()
    logdir, want = evaluated_after_the_block
    got, log = serve_and_read(logdir, ["--load_fast=true"], want)
    check_served(got, want, log)


# -- between two fits -----------------------------------------------------------------------------
@KERAS_NP_ARRAY
def test_an_evaluate_between_two_fits_is_published_at_the_step_reached(tmp_path: Path) -> None:
    """fit, evaluate, fit, evaluate in one ``with bus:``: two test evaluations at steps 8 and 16, each
    once, and the keras layout's validation run equal to Keras's TensorBoard's on the same calls."""
    keras_run = Keras(tmp_path)
    m = model()
    expected = []
    for _ in range(2):
        fit(m, keras_run.fit_callbacks)
        expected.append(evaluate(m, [keras_run.tensorboard]))
    keras_run.close(m)

    ours = Ours(tmp_path / "hookbus")
    m = model()
    results = []
    with ours.bus:
        for _ in range(2):
            fit(m, [ours.callback])
            results.append(evaluate(m, [ours.callback]))
    for mine, theirs in zip(results, expected, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-6)
    assert_same_points(tensors(keras_run.logdir / "validation"), tensors(ours.keras_tb / "validation"))
    assert_test_outputs(ours, [(8, results[0]), (16, results[1])])
    assert_training_outputs_kept(keras_run, ours, fits=2)


# -- without fit --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keras_evaluate_only(tmp_path_factory: pytest.TempPathFactory) -> tuple[Keras, dict[str, float]]:
    """Keras's TensorBoard on an evaluate of the compiled, untrained model, and its result: the
    same for both cases below."""
    keras_run = Keras(tmp_path_factory.mktemp("keras-evaluate-only"))
    with keras_np_array_ignored():
        m = model()
        expected = evaluate(m, [keras_run.tensorboard])
        keras_run.close(m)
    return keras_run, expected


@KERAS_NP_ARRAY
@pytest.mark.parametrize("where", ["inside", "outside"])
def test_an_evaluate_without_fit_is_a_test_evaluation_at_step_0(
    tmp_path: Path, keras_evaluate_only: tuple[Keras, dict[str, float]], where: str
) -> None:
    """A compiled model never trained: its evaluation is at step 0 (``iterations``), in the test file
    and run only (no validation file, no eval run), ``validation/evaluation_*_vs_iterations`` at 0
    under layout="keras" as Keras's TensorBoard writes it. On 19d8f43 it was an eval session's
    validation row."""
    keras_run, expected = keras_evaluate_only
    ours = Ours(tmp_path / "hookbus")
    m = model()
    if where == "inside":
        with ours.bus:
            result = evaluate(m, [ours.callback])
    else:
        result = evaluate(m, [ours.callback])
        ours.bus.close()
    assert result == pytest.approx(expected, rel=1e-6)
    assert_same_points(tensors(keras_run.logdir / "validation"), tensors(ours.keras_tb / "validation"))
    assert_test_outputs(ours, [(0, result)])
    assert not ours.eval_csv.exists() or rows(ours.eval_csv) == []
    assert not (ours.tb / "eval").exists()


# -- who receives a test evaluation -------------------------------------------------------------
def test_subscribers_naming_test_keys_pass_the_key_check_and_get_each_evaluation_once(tmp_path: Path) -> None:
    """``keys=["test/loss"]`` passes the bus's key check under fit (before any evaluate) and receives
    each evaluation once, ``mode="test"`` at the training step; ``keys=None`` receives it too, beside
    the training steps; ``keys=["eval/loss"]`` gets validation only. On 19d8f43 the first failed the
    key check."""
    bus = hookbus.EventBus()
    got: dict[str, list[tuple[str, int, tuple[str, ...]]]] = {"test": [], "all": [], "eval": []}

    def record(name: str) -> Callable[[Any], None]:
        return lambda event: got[name].append((event.mode, event.step, tuple(sorted(event.values))))

    bus.on("after_run", record("test"), keys=["test/loss"])
    bus.on("after_run", record("all"), every_n_steps=4)
    bus.on("after_run", record("eval"), keys=["eval/loss"])
    callback = hookbus.EventBusCallback(bus, KEYS)
    m = model()
    with bus:
        fit(m, [callback])
        evaluate(m, [callback])
    evaluate(m, [callback])  # after the block: a run of its own
    bus.close()
    tested = [("test", 8, ("test/accuracy", "test/loss"))] * 2
    assert got["test"] == tested
    assert [e for e in got["all"] if e[0] == "test"] == tested
    assert [e for e in got["all"] if e[0] == "train"] == [
        ("train", 4, tuple(KEYS[::-1])),
        ("train", 8, tuple(KEYS[::-1])),
    ]
    assert got["eval"] == [("eval", 4, ("eval/accuracy", "eval/loss")), ("eval", 8, ("eval/accuracy", "eval/loss"))]


def test_a_declared_key_evaluate_does_not_log_fails_naming_what_it_logs() -> None:
    bus = hookbus.EventBus()
    bus.on("after_run", lambda event: None, keys=["test/loss"])
    callback = hookbus.EventBusCallback(bus, ["loss", "auc"])
    m = model()
    with pytest.raises(ValueError, match=r"keys \['auc'\] are not in Keras's evaluation logs \['accuracy', 'loss'\]"):
        evaluate(m, [callback])
    bus.close()


# -- control sinks ignore it; predict publishes nothing -----------------------------------------
def _all_sinks(root: Path) -> list[hookbus.sink_api.Sink]:
    return [
        NanGuardSink(),
        EarlyStoppingSink("eval/loss", patience=1),
        StopAtStepSink(last_step=100),
        CheckpointSink(root / "ckpt", keep=10),
        ExportSink(root / "export", monitor="eval/loss"),
        ReduceLROnPlateauSink(monitor="eval/loss", patience=1, factor=0.5),
    ]


class PredictAtEpochEnd(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """A user's callback that predicts inside fit (Keras runs predict's own callbacks then)."""

    def __init__(self, extra: list[Any]) -> None:
        super().__init__()
        self.extra = extra

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.model.predict(TEST[0], verbose=0, callbacks=self.extra)


def _outputs(root: Path) -> dict[str, Any]:
    """What the sinks left, without wall times: CSV rows, TensorBoard points, checkpoint pointer."""
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*.csv")):
        found[path.name] = [{k: v for k, v in r.items() if k != "wall_time"} for r in rows(path)]
    for run in ("tb/train", "tb/eval", "tb-keras/train", "tb-keras/validation"):
        points = tensors(root / run) if run.startswith("tb-keras") else scalars(root / run)
        timed = ("steps/sec", "examples/sec", "outside_secs/step")  # timed: they differ between runs
        found[run] = {tag: p for tag, p in points.items() if tag not in timed}
    found["latest"] = Path(tf.train.latest_checkpoint(str(root / "ckpt"))).name
    found["checkpoints"] = sorted(p.name for p in (root / "ckpt").glob("*.index"))
    found["runs"] = sorted(p.name for p in (root / "tb").iterdir())
    return found


def _seeded_fit(root: Path, predicting: bool) -> tuple[Ours, Any]:
    ours = Ours(root, *_all_sinks(root))
    m = model()
    if predicting:
        m.predict(TEST[0], verbose=0, callbacks=[ours.callback])  # before any fit: no run opens
    extra = [PredictAtEpochEnd([ours.callback])] if predicting else []
    with ours.bus:
        fit(m, [ours.callback, *extra])
        if predicting:
            m.predict(TEST[0], verbose=0, callbacks=[ours.callback])
    if predicting:
        m.predict(TEST[0], verbose=0, callbacks=[ours.callback])
    ours.bus.close()
    return ours, m


@KERAS_NP_ARRAY
def test_predict_with_every_sink_attached_publishes_nothing_and_changes_nothing(tmp_path: Path) -> None:
    """predict before fit, inside fit (a callback's) and after it, with every sink attached: the
    outputs equal a run without predict, no test file or run appears, nothing stops or fails."""
    plain, _ = _seeded_fit(tmp_path / "plain", predicting=False)
    predicted, m = _seeded_fit(tmp_path / "predicted", predicting=True)
    assert _outputs(tmp_path / "predicted") == _outputs(tmp_path / "plain")
    assert not predicted.test_csv.exists()
    assert not (predicted.tb / "test").exists()
    stats = predicted.bus.stats()
    assert all(s.errors == 0 for s in stats.subscribers), stats
    assert predicted.bus.stop_reason is None
    assert plain.bus.stop_reason is None


@KERAS_NP_ARRAY
def test_control_sinks_ignore_a_test_evaluation(tmp_path: Path) -> None:
    """A test evaluation whose loss is NaN (a test set with NaN features), after fit, with the control
    sinks attached: no stop, no checkpoint saved or vetoed, no export, the learning rate untouched;
    the test CSV records the NaN."""
    ours = Ours(tmp_path, *_all_sinks(tmp_path))
    m = model()
    with ours.bus:
        fit(m, [ours.callback])
        before = _outputs(tmp_path), float(m.optimizer.learning_rate.numpy())
        exports = sorted(p.name for p in (tmp_path / "export").iterdir())
        huge = np.full_like(TEST[0], 3e38)  # logits overflow: the test loss is not finite
        m.evaluate(huge, TEST[1], batch_size=BATCH, verbose=0, callbacks=[ours.callback])
        assert ours.bus.stop_reason is None
    after = _outputs(tmp_path), float(m.optimizer.learning_rate.numpy())
    tested = rows(ours.test_csv)
    assert [r["step"] for r in tested] == ["8"]
    assert not np.isfinite(float(tested[0]["loss"]))
    apart = ("metrics.test.csv", "runs", "tb-keras/validation")  # where a test evaluation goes
    assert {k: v for k, v in after[0].items() if k not in apart} == {
        k: v for k, v in before[0].items() if k not in apart
    }
    assert after[0]["runs"] == sorted([*before[0]["runs"], "test"])
    validation = after[0]["tb-keras/validation"]
    assert {t: p[:-1] if t.startswith("evaluation_") else p for t, p in validation.items()} == before[0][
        "tb-keras/validation"
    ]
    assert after[1] == before[1]
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == exports


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: EarlyStoppingSink("test/loss"), r"monitor 'test/loss' is a test evaluation's .* 'eval/loss'"),
        (lambda: ReduceLROnPlateauSink(monitor="test/loss"), "monitor 'test/loss' is a test evaluation's"),
        (lambda: CheckpointSink("ckpt", keep_best=1, monitor="test/accuracy"), "'eval/accuracy'"),
        (lambda: ExportSink("export", monitor="test/loss"), "never steers training"),
    ],
)
def test_a_control_sink_monitoring_a_test_key_fails_at_construction(make: Callable[[], Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


# -- the event log: replay and watch --------------------------------------------------------------
@KERAS_NP_ARRAY
def test_the_event_log_replays_the_test_evaluation_and_watch_shows_it_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fit, then evaluate after the block: ``hookbus replay`` into a CSVSink writes the same test file
    (and the same validation rows); ``hookbus watch --once`` says finished, shows the training's loss,
    the validation's and the test's values apart. On 19d8f43 the evaluate's new run replaced the
    watcher's view with an eval session."""
    from hookbus._cli._cli import main

    ours = Ours(tmp_path / "live")
    m = model()
    with ours.bus:
        fit(m, [ours.callback])
    result = evaluate(m, [ours.callback])
    ours.bus.close()

    bus = hookbus.EventBus()
    bus.attach(CSVSink(tmp_path / "replayed.csv", every_n_steps=1))
    hookbus.replay(ours.log, bus)

    def strip(path: Path) -> list[dict[str, str]]:
        return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows(path)]

    assert strip(tmp_path / "replayed.test.csv") == strip(ours.test_csv)
    assert strip(tmp_path / "replayed.eval.csv") == strip(ours.eval_csv)
    assert strip(tmp_path / "replayed.csv") == strip(ours.csv)

    assert main(["watch", "--once", str(ours.log)]) == 0
    out = capsys.readouterr().out
    assert "finished | step 8" in out
    assert f"test/loss: last {result['loss']:.4g}" in out
    train_loss = float(rows(ours.csv)[-1]["loss"])
    assert f"  loss: last {train_loss:.4g}" in out
    validation = float(rows(ours.eval_csv)[-1]["loss"])
    assert f"eval/loss: last {validation:.4g}" in out
