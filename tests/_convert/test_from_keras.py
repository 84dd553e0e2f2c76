"""hookbus.from_keras: a Keras callback list and its conversion on the same seeded fit, their outputs
compared as the next tool reads them (EventAccumulator, ``history``, the weights, the CSV file)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
from _keras_data import KERAS_NP_ARRAY, classifier, data, keras_np_array_ignored  # noqa: E402
from _tb import Run, assert_same_runs, runs  # noqa: E402

import hookbus  # noqa: E402

TRAIN, VAL = data(64, 0), data(32, 1)
callbacks = keras.callbacks


def model(rate: float = 0.5) -> Any:
    """The seeded classifier (its layers named from scratch, so the histograms' tags agree)."""
    keras.backend.clear_session()
    return classifier(keras.optimizers.SGD(rate), ["accuracy"])


def fit(given: list[Any], epochs: int = 10, rate: float = 0.5, **kwargs: Any) -> tuple[Any, Any]:
    """A fresh seeded model fitted with ``given`` as its callbacks: (the model, its history)."""
    m = model(rate)
    history = m.fit(*TRAIN, validation_data=VAL, epochs=epochs, batch_size=16, verbose=0, callbacks=given, **kwargs)
    return m, history


def converted(given: list[Any], **kwargs: Any) -> tuple[list[Any], hookbus.EventBus]:
    """``from_keras(given)`` and the bus its callback publishes on."""
    result = hookbus.from_keras(given, report=io.StringIO(), **kwargs)
    publisher = next(c for c in result if isinstance(c, hookbus.EventBusCallback))
    return result, publisher.bus


def assert_same_history(theirs: Any, ours: Any) -> None:
    assert ours.epoch == theirs.epoch
    assert sorted(ours.history) == sorted(theirs.history)
    for name, values in theirs.history.items():
        np.testing.assert_allclose(ours.history[name], values, rtol=1e-6, err_msg=name)


def assert_same_weights(theirs: Any, ours: Any) -> None:
    for a, b in zip(theirs.get_weights(), ours.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-6)


# -- the list ------------------------------------------------------------------------------------


class Recorder(keras.callbacks.Callback):  # type: ignore[misc,name-defined]  # Keras ships no type information
    """A callback of the user's own: passes through, and sees every epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[int] = []

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epochs.append(epoch)


def test_converted_callbacks_become_one_publisher_at_the_first_ones_place_and_the_rest_pass_through(
    tmp_path: Path,
) -> None:
    first, last = Recorder(), callbacks.LambdaCallback()
    given = [first, callbacks.TensorBoard(str(tmp_path)), callbacks.History(), callbacks.EarlyStopping(), last]
    out = io.StringIO()
    result = hookbus.from_keras(given, report=out)
    assert [type(c).__name__ for c in result] == ["Recorder", "EventBusCallback", "History", "LambdaCallback"]
    assert result[0] is first
    assert result[2] is given[2]
    assert result[3] is last
    assert out.getvalue() == (
        "hookbus.from_keras: converted TensorBoard, EarlyStopping; passed through Recorder, History, LambdaCallback\n"
    )
    bus = result[1].bus
    assert [s.name for s in bus.subscribers] == ["EarlyStoppingSink", "TensorBoardSink", "ConsoleSink"]


def test_a_list_with_nothing_to_convert_comes_back_as_it_is() -> None:
    given = [callbacks.LambdaCallback(), Recorder()]
    out = io.StringIO()
    assert hookbus.from_keras(given, report=out) == given
    assert out.getvalue() == "hookbus.from_keras: converted nothing; passed through LambdaCallback, Recorder\n"


def test_a_subclass_of_a_keras_callback_is_its_own_and_passes_through(tmp_path: Path) -> None:
    class MyBoard(keras.callbacks.TensorBoard):  # type: ignore[misc,name-defined]
        pass

    given = [MyBoard(str(tmp_path))]
    assert hookbus.from_keras(given, report=io.StringIO()) == given


def test_the_bus_given_gets_the_sinks() -> None:
    bus = hookbus.EventBus()
    result, used = converted([callbacks.EarlyStopping(monitor="val_accuracy")], bus=bus, dashboard=False)
    assert used is bus
    assert [s.name for s in bus.subscribers] == ["EarlyStoppingSink"]
    assert result[0].keys == ("loss", "accuracy")  # loss, and what the monitors read


def test_keys_and_the_dashboard_unless_declined(tmp_path: Path) -> None:
    given = [callbacks.ModelCheckpoint(str(tmp_path / "{epoch}-{val_mae:.2f}.keras"))]
    result, bus = converted(given, keys="accuracy")
    assert result[0].keys == ("loss", "accuracy", "mae")  # what the file name needs too
    assert [s.name for s in bus.subscribers] == ["ExportSink", "ConsoleSink"]  # what hookbus adds comes along
    _, bus = converted([callbacks.ModelCheckpoint(str(tmp_path / "m.keras"))], dashboard=False)
    assert [s.name for s in bus.subscribers] == ["ExportSink"]


@pytest.mark.parametrize(
    ("callback", "message"),
    [
        (lambda d: callbacks.TensorBoard(d, write_images=True), r"TensorBoard\(write_images=True\)"),
        (lambda d: callbacks.TensorBoard(d, write_graph=False), r"TensorBoard\(write_graph=False\)"),
        (lambda d: callbacks.TensorBoard(d, write_steps_per_second=True), r"TensorBoard\(write_steps_per_second="),
        (lambda d: callbacks.TensorBoard(d, embeddings_freq=1), r"TensorBoard\(embeddings_freq=1\)"),
        (lambda d: callbacks.TensorBoard(d, profile_batch=(2, 4)), r"TensorBoard\(profile_batch=\(2, 4\)\).*Profiler"),
        (lambda d: callbacks.TensorBoard(d, profile_batch=3), r"TensorBoard\(profile_batch=3\)"),
        (lambda d: callbacks.EarlyStopping(start_from_epoch=2), r"EarlyStopping\(start_from_epoch=2\)"),
        (lambda d: callbacks.EarlyStopping(monitor=""), r"EarlyStopping\(monitor=''\)"),
    ],
)
def test_an_argument_with_no_equivalent_fails_naming_the_callback_the_argument_and_the_value(
    tmp_path: Path, callback: Any, message: str
) -> None:
    bus = hookbus.EventBus()
    kept = callbacks.EarlyStopping(monitor="val_accuracy")
    with pytest.raises(ValueError, match="hookbus.from_keras: " + message):
        hookbus.from_keras([kept, callback(str(tmp_path))], bus=bus, report=io.StringIO())
    assert bus.subscribers == []  # nothing attached: the list is checked first


@KERAS_NP_ARRAY
def test_the_same_cell_runs_twice_the_bus_made_for_it_closes_as_each_fit_ends(tmp_path: Path) -> None:
    """A notebook cell ``model.fit(..., callbacks=hookbus.from_keras([...]))`` run twice: the first
    list's bus closed its files as its fit ended, so the second takes the same outputs."""
    m = model()
    for _ in range(2):
        given = [callbacks.TensorBoard(str(tmp_path / "logs")), callbacks.CSVLogger(str(tmp_path / "log.csv"))]
        m.fit(*TRAIN, validation_data=VAL, epochs=2, batch_size=16, verbose=0, callbacks=converted(given)[0])
    header, rows = _table(tmp_path / "log.csv")
    assert [(r[0], r[2]) for r in rows] == [("12", "0"), ("16", "1")]  # the second fit's, CSVLogger(append=False)
    assert sorted(runs(tmp_path / "logs")["train"]["epoch_loss"]) == [0, 1]


def test_not_a_list_fails() -> None:
    with pytest.raises(TypeError, match="callbacks must be a list of Keras callbacks"):
        hookbus.from_keras("TensorBoard")


# -- TensorBoard ----------------------------------------------------------------------------------


def _without_graphs(found: dict[str, Run]) -> dict[str, Run]:
    """Keras's tag ``keras`` holds its traced train function beside the model's configuration; the
    sink writes the configuration only: compared apart."""
    return {name: {t: p for t, p in run.items() if t != "keras"} for name, run in found.items()}


@KERAS_NP_ARRAY
@pytest.mark.parametrize("update_freq", ["epoch", 2])
def test_tensorboard_writes_kerass_runs_tags_steps_and_values(tmp_path: Path, update_freq: str | int) -> None:
    """Keras's TensorBoard(histogram_freq=2, update_freq) and its conversion (no bus given, no
    ``with bus:``) on the same fit: the same runs (train/, validation/), tags (epoch_*,
    batch_* with update_freq, evaluation_*_vs_iterations, the weights' histograms), steps and
    values, as EventAccumulator reads them once fit returns."""
    theirs_dir, ours_dir = tmp_path / "keras", tmp_path / "hookbus"
    fit([callbacks.TensorBoard(str(theirs_dir), histogram_freq=2, update_freq=update_freq)], epochs=4)
    given = [callbacks.TensorBoard(str(ours_dir), histogram_freq=2, update_freq=update_freq)]
    result, bus = converted(given, keys=["loss", "accuracy"])
    fit(result, epochs=4)
    theirs, ours = runs(theirs_dir), runs(ours_dir)
    assert sorted(theirs) == ["train", "validation"]
    assert "sequential/dense/kernel/histogram" in theirs["train"]
    assert sorted(theirs["train"]["epoch_loss"]) == [0, 1, 2, 3]
    if update_freq == 2:
        assert sorted(theirs["train"]["batch_loss"]) == list(range(2, 17, 2))
    assert sorted(ours["train"]["keras"]) == [0]
    assert_same_runs(_without_graphs(theirs), _without_graphs(ours))
    bus.close()


# -- EarlyStopping --------------------------------------------------------------------------------

#: Keras's early_stopping_test cases on a real fit whose val_loss is best at epoch 1 and then
#: drifts (by less than 0.01), whose loss falls every epoch, and whose val_accuracy ties.
EARLY_STOPPING = [
    {"monitor": "val_loss", "patience": 0},
    {"monitor": "val_loss", "patience": 2, "restore_best_weights": True},
    {"monitor": "val_loss", "patience": 3, "min_delta": 0.001, "mode": "min", "restore_best_weights": True},
    {"monitor": "val_loss", "patience": 3, "baseline": 0.55, "restore_best_weights": True},
    {"monitor": "loss", "patience": 1, "min_delta": 0.005},
    {"monitor": "val_accuracy", "patience": 2, "restore_best_weights": True},
    {"monitor": "val_accuracy", "patience": 2, "mode": "min"},
    {"monitor": "loss", "patience": 2, "mode": "max", "baseline": 0.1},
]


@pytest.mark.parametrize("settings", EARLY_STOPPING, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_early_stopping_stops_at_kerass_epoch_with_its_history_and_weights(settings: dict[str, Any]) -> None:
    """The same stopped epoch, ``history`` and (restored) weights as Keras's EarlyStopping."""
    keras_stopper = callbacks.EarlyStopping(**settings)
    theirs, their_history = fit([keras_stopper])
    result, bus = converted([callbacks.EarlyStopping(**settings)])
    with bus:
        ours, our_history = fit(result)
    assert len(their_history.epoch) < 10 or settings["monitor"] == "loss" and "min_delta" not in settings
    assert_same_history(their_history, our_history)
    assert_same_weights(theirs, ours)


# -- ModelCheckpoint ------------------------------------------------------------------------------

#: Keras's model_checkpoint_test cases: file name templates, best only (by a validation value, a
#: training one, with a threshold), every epoch, every N batches, weights only, a subdirectory.
MODEL_CHECKPOINT: list[dict[str, Any]] = [
    {"filepath": "ckpt-{epoch:02d}-{val_loss:.2f}.keras", "save_best_only": True},
    {"filepath": "model.keras"},
    {"filepath": "w-{epoch:02d}.weights.h5", "save_weights_only": True},
    {"filepath": "best.weights.h5", "save_weights_only": True, "save_best_only": True, "monitor": "loss"},
    {"filepath": "b-{epoch:02d}-{batch:02d}-{loss:.3f}.keras", "save_freq": 3},
    {"filepath": "acc-{val_accuracy:.3f}.keras", "monitor": "val_accuracy", "save_best_only": True},
    {"filepath": "t-{epoch}.keras", "monitor": "val_loss", "save_best_only": True, "initial_value_threshold": 0.57},
    {"filepath": "run/{epoch}/model.keras", "mode": "min", "monitor": "loss", "save_best_only": True},
]


def _files(directory: Path) -> list[str]:
    """The files a tool sees under ``directory`` (hookbus's lock, a hidden ``.export-*.lock``, aside)."""
    found = [p for p in directory.rglob("*") if p.is_file() and not p.name.startswith(".export")]
    return sorted(str(p.relative_to(directory)) for p in found)


def _predictions(path: Path) -> Any:
    if path.name.endswith(".weights.h5"):
        m = model()
        m.load_weights(str(path))
    else:
        m = keras.saving.load_model(str(path))
    return m.predict(VAL[0], verbose=0)


def _both(directory: Path) -> list[Any]:
    """The best and the last model side by side in one directory."""
    best = callbacks.ModelCheckpoint(str(directory / "best.keras"), save_best_only=True)
    return [best, callbacks.ModelCheckpoint(str(directory / "last.keras"))]


@pytest.fixture(scope="module")
def keras_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keras's own files for every ModelCheckpoint case below, from one seeded 5-epoch fit:
    ``<i>/`` holds ``MODEL_CHECKPOINT[i]``'s, ``both/`` the two of one directory. A ModelCheckpoint
    only reads the model and the logs (each keeps its own best and batch count), so each writes
    there what it writes alone in that fit; one fit stands for one per case."""
    root = tmp_path_factory.mktemp("keras-checkpoints")
    given = _both(root / "both")
    for index, settings in enumerate(MODEL_CHECKPOINT):
        options = {k: v for k, v in settings.items() if k != "filepath"}
        given.append(callbacks.ModelCheckpoint(str(root / str(index) / settings["filepath"]), **options))
    with keras_np_array_ignored():
        fit(given, epochs=5)
    return root


@KERAS_NP_ARRAY
@pytest.mark.parametrize("settings", MODEL_CHECKPOINT, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_model_checkpoint_writes_the_same_files_at_the_same_paths(
    tmp_path: Path, keras_checkpoints: Path, settings: dict[str, Any]
) -> None:
    """The same file names (Keras's formatting of epoch, batch and the logs) and files that load
    (``keras.saving.load_model``, ``model.load_weights``) to the same predictions."""
    theirs_dir, ours_dir = keras_checkpoints / str(MODEL_CHECKPOINT.index(settings)), tmp_path / "hookbus"
    options = {k: v for k, v in settings.items() if k != "filepath"}
    result, bus = converted([callbacks.ModelCheckpoint(str(ours_dir / settings["filepath"]), **options)])
    with bus:
        fit(result, epochs=5)
    theirs = _files(theirs_dir)
    assert theirs
    assert _files(ours_dir) == theirs
    for name in theirs:
        np.testing.assert_allclose(_predictions(ours_dir / name), _predictions(theirs_dir / name), rtol=1e-6)


@KERAS_NP_ARRAY
def test_two_model_checkpoints_share_a_directory(tmp_path: Path, keras_checkpoints: Path) -> None:
    """The best and the last model side by side in one directory, as Keras writes them."""
    theirs_dir, ours_dir = keras_checkpoints / "both", tmp_path / "hookbus"
    result, bus = converted(_both(ours_dir))
    with bus:
        fit(result, epochs=5)
    assert _files(ours_dir) == _files(theirs_dir) == ["best.keras", "last.keras"]
    for name in ("best.keras", "last.keras"):
        np.testing.assert_allclose(_predictions(ours_dir / name), _predictions(theirs_dir / name), rtol=1e-6)


def test_model_checkpoint_with_save_best_only_on_batches_fails_naming_it(tmp_path: Path) -> None:
    given = [callbacks.ModelCheckpoint(str(tmp_path / "m.keras"), save_best_only=True, save_freq=4)]
    with pytest.raises(ValueError, match=r"ModelCheckpoint\(save_freq=4\) has no hookbus equivalent"):
        hookbus.from_keras(given)


# -- CSVLogger ------------------------------------------------------------------------------------


def _table(path: Path, separator: str = ",") -> tuple[list[str], list[list[str]]]:
    """The header and rows of a CSV file as ``csv`` reads them (pandas reads the same)."""
    import csv

    with path.open(newline="") as f:
        rows = list(csv.reader(f, delimiter=separator))
    return rows[0], rows[1:]


def assert_csv_logger_columns(theirs: Path, ours: Path, separator: str = ",") -> None:
    """CSVLogger's columns, in its order, after hookbus's ``step`` and ``wall_time``, with the same
    cells (``NA`` included) in the same rows."""
    their_header, their_rows = _table(theirs, separator)
    our_header, our_rows = _table(ours, separator)
    assert our_header == ["step", "wall_time", *their_header]
    assert len(our_rows) == len(their_rows)
    for mine, their in zip(our_rows, their_rows, strict=True):
        assert mine[2] == their[0]  # the epoch
        for a, b in zip(mine[3:], their[1:], strict=True):
            assert (a == b == "NA") or float(a) == pytest.approx(float(b), rel=1e-6, nan_ok=True)


SEPARATORS = [",", ";", "\t"]


@pytest.fixture(scope="module")
def keras_csv_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Keras's CSVLogger file for each separator, from one seeded 3-epoch fit (a CSVLogger only
    reads the logs, so each writes what it writes alone in that fit)."""
    root = tmp_path_factory.mktemp("keras-csv")
    paths = {separator: root / f"keras-{index}.csv" for index, separator in enumerate(SEPARATORS)}
    fit([callbacks.CSVLogger(str(path), separator=separator) for separator, path in paths.items()], epochs=3)
    return paths


@pytest.mark.parametrize("separator", SEPARATORS)
def test_csv_logger_writes_its_columns_and_rows_in_the_same_file(
    tmp_path: Path, keras_csv_logs: dict[str, Path], separator: str
) -> None:
    theirs, ours = keras_csv_logs[separator], tmp_path / "hookbus.csv"
    result, bus = converted([callbacks.CSVLogger(str(ours), separator=separator)])
    fit(result, epochs=3)
    bus.close()
    assert_csv_logger_columns(theirs, ours, separator)


@pytest.mark.parametrize("append", [False, True])
def test_csv_logger_append_across_two_fits(tmp_path: Path, append: bool) -> None:
    """Keras's csv_logger_test: a second fit of the model adds its rows (append=True) or starts
    the file anew (append=False); with append=False a file left by an earlier run is replaced."""
    theirs, ours = tmp_path / "keras.csv", tmp_path / "hookbus.csv"
    if not append:  # left by an earlier run of the script
        theirs.write_text("epoch,loss\n0,9.0\n")
        ours.write_text("step,wall_time,epoch,loss\n4,1.0,0,9.0\n")
    for path in (theirs, ours):
        logger = callbacks.CSVLogger(str(path), append=append)
        given = [logger] if path == theirs else converted([logger])[0]
        m = model()
        for _ in range(2):
            m.fit(*TRAIN, validation_data=VAL, epochs=2, batch_size=16, verbose=0, callbacks=given)
    assert len(_table(theirs)[1]) == (4 if append else 2)
    assert_csv_logger_columns(theirs, ours)


# -- TerminateOnNaN -------------------------------------------------------------------------------


def exploding() -> Any:
    """Keras's terminate_on_nan_test model: five Dense layers whose kernels are 1e5 overflow the
    first batch's loss (inf); seeded."""
    keras.utils.set_random_seed(0)
    keras.backend.clear_session()
    big = keras.initializers.Constant(1e5)
    layers = [keras.layers.Dense(8, activation="relu", kernel_initializer=big) for _ in range(5)]
    m = keras.Sequential([keras.Input((4,)), *layers, keras.layers.Dense(1, kernel_initializer=big)])
    m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    return m


def test_terminate_on_nan_stops_after_the_same_batch_with_the_epochs_csv_row(tmp_path: Path) -> None:
    """Keras's terminate_on_nan_test (graceful stop): fit ends after the batch whose loss is not
    finite; the same history and step, and CSVLogger's row of the epoch it stopped in."""
    theirs, ours = tmp_path / "keras.csv", tmp_path / "hookbus.csv"
    found = []
    for path in (theirs, ours):
        given = [callbacks.TerminateOnNaN(), callbacks.CSVLogger(str(path))]
        m = exploding()
        used = given if path == theirs else converted(given)[0]
        history = m.fit(*TRAIN, validation_data=VAL, epochs=3, batch_size=16, verbose=0, callbacks=used)
        found.append((m, history))
    (their_model, their_history), (our_model, our_history) = found
    assert int(their_model.optimizer.iterations) == int(our_model.optimizer.iterations) == 1
    assert_same_history(their_history, our_history)
    assert not np.isfinite(their_history.history["loss"][0])
    assert len(_table(theirs)[1]) == 1
    assert_csv_logger_columns(theirs, ours)


def test_terminate_on_nan_raise_error_raises_a_runtime_error_at_the_same_batch(tmp_path: Path) -> None:
    """raise_error=True: a RuntimeError from fit at that batch, as Keras's; no epoch row written."""
    theirs, ours = tmp_path / "keras.csv", tmp_path / "hookbus.csv"
    steps = []
    for path in (theirs, ours):
        given = [callbacks.TerminateOnNaN(raise_error=True), callbacks.CSVLogger(str(path))]
        m = exploding()
        if path == theirs:
            with pytest.raises(RuntimeError, match="NaN or Inf loss"):
                m.fit(*TRAIN, epochs=3, batch_size=16, verbose=0, callbacks=given)
            given[1].csv_file.close()  # Keras leaves it open: no on_train_end after the raise
        else:
            result, bus = converted(given)
            with pytest.raises(RuntimeError, match="loss"), bus:
                m.fit(*TRAIN, epochs=3, batch_size=16, verbose=0, callbacks=result)
        steps.append(int(m.optimizer.iterations))
    assert steps == [1, 1]
    assert theirs.read_text() == ""  # CSVLogger writes its header with the first epoch's row
    assert not ours.exists() or len(ours.read_text().splitlines()) <= 1  # a header at most


# -- ReduceLROnPlateau and LearningRateScheduler --------------------------------------------------

REDUCE_LR = [
    {"monitor": "val_loss", "factor": 0.1, "patience": 1, "min_delta": 100.0},  # Keras's: reduces every epoch
    {"monitor": "val_loss", "factor": 0.5, "patience": 1, "min_delta": 100.0, "min_lr": 0.1},  # honours min_lr
    {"monitor": "val_loss", "factor": 0.5, "patience": 1, "cooldown": 2, "min_delta": 100.0},
    {"monitor": "loss", "factor": 0.5, "patience": 0, "min_delta": 0.02},
    {"monitor": "val_accuracy", "factor": 0.5, "patience": 2},
]


@KERAS_NP_ARRAY
@pytest.mark.parametrize("settings", REDUCE_LR, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_reduce_lr_on_plateau_sets_the_same_rates_history_and_weights(settings: dict[str, Any]) -> None:
    """Keras's reduce_lr_on_plateau_test cases: the same rates (``learning_rate`` in ``history``),
    losses and final weights."""
    theirs, their_history = fit([callbacks.ReduceLROnPlateau(**settings)], epochs=6)
    result, bus = converted([callbacks.ReduceLROnPlateau(**settings)])
    with bus:
        ours, our_history = fit(result, epochs=6)
    assert len(set(their_history.history["learning_rate"])) > 1  # the rate changed
    assert_same_history(their_history, our_history)
    assert float(ours.optimizer.learning_rate) == pytest.approx(float(theirs.optimizer.learning_rate))
    assert_same_weights(theirs, ours)


def halve_from_epoch_2(epoch: int) -> float:
    return 0.5 if epoch < 2 else 0.25


SCHEDULES = {
    "one argument": halve_from_epoch_2,
    "epoch and rate": lambda epoch, lr: lr * 0.9,
    "Keras's test": lambda step: 1.0 / (1.0 + step),
}


@KERAS_NP_ARRAY
@pytest.mark.parametrize("schedule", SCHEDULES.values(), ids=SCHEDULES.keys())
def test_learning_rate_scheduler_sets_the_same_rates_history_and_weights(schedule: Any) -> None:
    theirs, their_history = fit([callbacks.LearningRateScheduler(schedule)], epochs=4)
    result, bus = converted([callbacks.LearningRateScheduler(schedule)])
    with bus:
        ours, our_history = fit(result, epochs=4)
    assert_same_history(their_history, our_history)
    assert float(ours.optimizer.learning_rate) == pytest.approx(float(theirs.optimizer.learning_rate))
    assert_same_weights(theirs, ours)


# -- BackupAndRestore -----------------------------------------------------------------------------


class InterruptAfterEpoch(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Keras's backup_and_restore_test interruption: raises at the end of epoch ``epoch``."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch == self.epoch:
            raise RuntimeError("interrupted")


def _latest(directory: Path) -> str | None:
    found: str | None = tf.train.latest_checkpoint(str(directory))
    return found


@KERAS_NP_ARRAY
@pytest.mark.parametrize("save_freq", ["epoch", 4])
def test_backup_and_restore_resumes_an_interrupted_fit_as_keras_and_deletes_its_backup(
    tmp_path: Path, save_freq: str | int
) -> None:
    """Keras's backup_and_restore_test: a fit interrupted after epoch 2 resumes at epoch 3 with the
    same weights (``history.epoch``, values, final weights as Keras's own); the completed fit
    deletes the backup (delete_checkpoint=True), so running the script again trains from epoch 0.
    With save_freq=4 (batches) Keras trains the interrupted epoch again; hookbus resumes after it."""
    theirs_dir, ours_dir = tmp_path / "keras", tmp_path / "hookbus"
    with pytest.raises(RuntimeError, match="interrupted"):
        fit([callbacks.BackupAndRestore(str(theirs_dir), save_freq=save_freq), InterruptAfterEpoch(2)], epochs=5)
    theirs, their_history = fit([callbacks.BackupAndRestore(str(theirs_dir), save_freq=save_freq)], epochs=5)

    result, bus = converted([callbacks.BackupAndRestore(str(ours_dir), save_freq=save_freq), InterruptAfterEpoch(2)])
    with pytest.raises(RuntimeError, match="interrupted"), bus:
        fit(result, epochs=5)
    assert _latest(ours_dir) is not None  # the backup a restarted script resumes from
    result, bus = converted([callbacks.BackupAndRestore(str(ours_dir), save_freq=save_freq)])
    with bus:
        ours, our_history = fit(result, epochs=5)

    if save_freq == "epoch":
        assert their_history.epoch == [3, 4]
        assert_same_history(their_history, our_history)
        assert_same_weights(theirs, ours)
    else:  # Keras's batch backup of epoch 2's last batch records epoch 2: it trains that epoch again
        assert their_history.epoch == [2, 3, 4]
        assert our_history.epoch == [3, 4]  # hookbus resumes at the step its checkpoint holds
    assert not theirs_dir.exists()
    assert _latest(ours_dir) is None
    result, bus = converted([callbacks.BackupAndRestore(str(ours_dir), save_freq=save_freq)])
    with bus:
        assert fit(result, epochs=5)[1].epoch == [0, 1, 2, 3, 4]


@KERAS_NP_ARRAY
def test_backup_and_restore_keeps_its_backup_with_delete_checkpoint_false(tmp_path: Path) -> None:
    result, bus = converted([callbacks.BackupAndRestore(str(tmp_path), delete_checkpoint=False)])
    with bus:
        fit(result, epochs=2)
    assert _latest(tmp_path) is not None
    result, bus = converted([callbacks.BackupAndRestore(str(tmp_path), delete_checkpoint=False)])
    with bus:
        assert fit(result, epochs=3)[1].epoch == [2]  # as Keras's: the backup says two epochs are done
