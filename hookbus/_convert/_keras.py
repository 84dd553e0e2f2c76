"""from_keras: a Keras callback list as one EventBusCallback and its sinks (the README's table as code)."""

from __future__ import annotations

import inspect
import os
import string
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from hookbus._bus._bus import EventBus
from hookbus._tf.keras._callback import EventBusCallback
from hookbus._tf.keras._known import keras_callback_name
from hookbus.sink_api import EPOCH_PREFIX, EVAL_PREFIX, Sink
from hookbus.sinks import (
    CheckpointSink,
    ConsoleSink,
    CSVSink,
    EarlyStoppingSink,
    ExportSink,
    LearningRateSchedulerSink,
    MLflowSink,
    NanGuardSink,
    ReduceLROnPlateauSink,
    TensorBoardSink,
)
from hookbus.validate import flag

__all__ = ["from_keras"]

_VAL = "val_"
#: Where a converted ``MlflowCallback``'s sink keeps its spool and run id (relative to the working directory).
MLFLOW_DIRECTORY = "hookbus-mlflow"


@dataclass
class _Converted:
    """What one Keras callback becomes: its sinks, and the Keras log names they need published."""

    sinks: list[Sink] = field(default_factory=list)
    log_names: list[str] = field(default_factory=list)
    restore: bool = False  # the publisher restores from the checkpoint sink's directory


def _refuse(kind: str, argument: str, value: Any, why: str) -> ValueError:
    return ValueError(f"hookbus.from_keras: {kind}({argument}={value!r}) has no hookbus equivalent: {why}")


def _monitored(kind: str, monitor: Any) -> tuple[str, str]:
    """The bus key a Keras ``monitor`` is read from at an epoch end, and the log name to publish:
    ``val_<name>`` is fit's validation (``eval/<name>``), any other name the epoch's value
    (``epoch/<name>``), as Keras's callbacks read both from the epoch's logs."""
    if not isinstance(monitor, str) or not monitor:
        raise ValueError(f"hookbus.from_keras: {kind}(monitor={monitor!r}) must name a Keras log (such as 'val_loss')")
    if monitor.startswith(_VAL) and len(monitor) > len(_VAL):
        name = monitor[len(_VAL) :]
        return EVAL_PREFIX + name, name
    return EPOCH_PREFIX + monitor, monitor


def _tensorboard(callback: Any) -> _Converted:
    kind = "TensorBoard"
    # Keras keeps its arguments as attributes (update_freq="batch" already as 1).
    if callback.write_images:
        raise _refuse(kind, "write_images", callback.write_images, "hookbus writes no weight images")
    if not callback.write_graph:
        raise _refuse(kind, "write_graph", False, "layout='keras' always writes the model's configuration")
    if callback.write_steps_per_second:
        raise _refuse(kind, "write_steps_per_second", True, "layout='keras' writes no steps_per_second tags")
    if callback.embeddings_freq:
        raise _refuse(kind, "embeddings_freq", callback.embeddings_freq, "hookbus writes no embeddings")
    if callback.embeddings_metadata is not None:
        raise _refuse(kind, "embeddings_metadata", callback.embeddings_metadata, "hookbus writes no embeddings")
    profile = (callback._start_batch, callback._stop_batch)  # Keras keeps profile_batch only so
    if profile != (0, 0):
        raise _refuse(
            kind,
            "profile_batch",
            profile if profile[0] != profile[1] else profile[0],
            "profile with ProfilerSink(logdir, start_step=..., num_steps=...) beside from_keras's callback",
        )
    sink = TensorBoardSink(
        callback.log_dir,
        layout="keras",
        histogram_freq=callback.histogram_freq,
        update_freq=callback.update_freq,
    )
    return _Converted([sink])


def _fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def _model_checkpoint(callback: Any) -> _Converted:
    kind = "ModelCheckpoint"
    filepath, save_freq = str(callback.filepath), callback.save_freq
    # The directory is the part of the path before any field: it holds the lock and the staged files.
    head, _, _ = filepath.partition("{")
    directory = os.path.dirname(head) or "."
    filename = os.path.relpath(filepath, directory) if directory != "." else filepath
    log_names = [f for f in _fields(filepath) if f not in ("epoch", "batch")]
    options: dict[str, Any] = {}
    if callback.save_best_only:
        if save_freq != "epoch":
            raise _refuse(
                kind,
                "save_freq",
                save_freq,
                "with save_best_only=True hookbus compares the monitor at epoch ends (save_freq='epoch')",
            )
        monitor = callback.monitor
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"hookbus.from_keras: {kind}(monitor={monitor!r}) must name a Keras log")
        _, name = _monitored(kind, monitor)
        options.update(monitor=EPOCH_PREFIX + monitor, mode=callback.mode)  # read from the epoch's logs, as Keras
        log_names.append(name)
        if callback.best is not None:  # initial_value_threshold, which Keras keeps as its first best
            options["initial_value_threshold"] = float(callback.best)
    elif save_freq == "epoch":
        options["every_epoch"] = True
    else:
        options["every_n_steps"] = save_freq
    sink = ExportSink(
        directory,
        keep=None,
        filename=filename,
        weights_only=bool(callback.save_weights_only),
        **options,
    )
    names = [n[len(_VAL) :] if n.startswith(_VAL) else n for n in log_names]
    return _Converted([sink], [n for n in names if n != "epoch"])


def _early_stopping(callback: Any) -> _Converted:
    kind = "EarlyStopping"
    if callback.start_from_epoch:
        raise _refuse(
            kind,
            "start_from_epoch",
            callback.start_from_epoch,
            "EarlyStoppingSink counts from a training step (min_steps=), not an epoch",
        )
    key, name = _monitored(kind, callback.monitor)
    sink = EarlyStoppingSink(
        monitor=key,
        mode=callback.mode,  # Keras has already turned an unknown mode into "auto", with its warning
        patience=callback.patience,
        min_delta=float(callback.min_delta),  # Keras keeps it as abs(min_delta), its sign set at train begin
        baseline=None if callback.baseline is None else float(callback.baseline),
        restore_best=bool(callback.restore_best_weights),
        stop_on_nonfinite=False,  # Keras's rule: a NaN is never an improvement, and never stops at once
    )
    return _Converted([sink], [name])


def _csv_logger(callback: Any) -> _Converted:
    sink = CSVSink(callback.filename, epochs=True, separator=callback.sep, append=bool(callback.append))
    return _Converted([sink])


def _terminate_on_nan(callback: Any) -> _Converted:
    # Keras checks every batch's loss: stop after that batch, or raise there (a RuntimeError, as Keras).
    raise_error = bool(getattr(callback, "raise_error", False))
    sink = NanGuardSink("loss", every_n_steps=1, on_nan="raise" if raise_error else "stop")
    return _Converted([sink], ["loss"])


def _reduce_lr_on_plateau(callback: Any) -> _Converted:
    key, name = _monitored("ReduceLROnPlateau", callback.monitor)
    sink = ReduceLROnPlateauSink(
        monitor=key,
        factor=float(callback.factor),
        patience=callback.patience,
        mode=callback.mode,
        min_delta=float(callback.min_delta),  # kept as abs(min_delta), as EarlyStopping's
        cooldown=callback.cooldown,
        min_lr=float(callback.min_lr),
    )
    return _Converted([sink], [name])


class _EpochOnly:
    """A Keras schedule of the epoch alone, ``schedule(epoch)``, called as ``(epoch, lr)``."""

    def __init__(self, schedule: Callable[[int], float]) -> None:
        self.schedule = schedule

    def __call__(self, epoch: int, lr: float) -> float:
        return self.schedule(epoch)

    def __repr__(self) -> str:
        return f"{self.schedule!r} (of the epoch alone)"


def _learning_rate_scheduler(callback: Any) -> _Converted:
    schedule = callback.schedule
    if not callable(schedule):
        raise ValueError(f"hookbus.from_keras: LearningRateScheduler(schedule={schedule!r}) must be a function")
    # Keras calls schedule(epoch, lr), and schedule(epoch) where that raises TypeError; hookbus
    # reads which one it is from the signature, before training.
    try:
        signature = inspect.signature(schedule)
    except ValueError:  # a builtin without a signature: called as Keras's new API calls it
        signature = None
    if signature is not None and not _binds(signature, 0, 0.1) and _binds(signature, 0):
        schedule = _EpochOnly(schedule)
    return _Converted([LearningRateSchedulerSink(schedule)])


def _binds(signature: inspect.Signature, *args: Any) -> bool:
    try:
        signature.bind(*args)
    except TypeError:
        return False
    return True


def _backup_and_restore(callback: Any) -> _Converted:
    save_freq = callback.save_freq
    schedule: dict[str, Any] = {} if save_freq == "epoch" else {"every_n_steps": save_freq}  # epoch: the default
    sink = CheckpointSink(
        callback.backup_dir,
        keep=2 if callback.double_checkpoint else 1,
        delete_at_end=bool(callback.delete_checkpoint),
        **schedule,
    )
    return _Converted([sink], restore=True)


def _mlflow_callback(callback: Any) -> _Converted:
    kind = "MlflowCallback"
    model_id = getattr(callback, "model_id", None)
    if model_id is not None:
        raise _refuse(kind, "model_id", model_id, "MLflowSink links the metrics to the run alone, not a logged model")
    import mlflow  # an MlflowCallback exists: MLflow is installed

    schedule: dict[str, Any] = {}
    if not callback.log_every_epoch:
        every = callback.log_every_n_steps
        if isinstance(every, bool) or not isinstance(every, int) or every <= 0:
            raise ValueError(f"hookbus.from_keras: {kind}(log_every_n_steps={every!r}) must be a positive int")
        schedule["every_n_steps"] = every
    sink = MLflowSink(
        mlflow.get_tracking_uri(),  # where the callback's fluent calls go
        run_id=_fluent_run,
        layout="keras",
        directory=MLFLOW_DIRECTORY,
        **schedule,
    )
    return _Converted([sink])


def _fluent_run() -> str:
    """The run MLflow's fluent API logs into now: the active one, else a new one made active, as the
    callback's first ``log_params`` makes it (left active, never ended)."""
    import mlflow

    run = mlflow.active_run() or mlflow.start_run()
    return str(run.info.run_id)


def _converter_name(callback: Any) -> str | None:
    """The converted callback ``callback`` is, by its exact class: Keras's own, or MLflow's."""
    module = sys.modules.get("mlflow.keras.callback")  # imported wherever an MlflowCallback exists
    if module is not None and type(callback) is getattr(module, "MlflowCallback", None):
        return "MlflowCallback"
    return keras_callback_name(callback)


_CONVERTERS: dict[str, Callable[[Any], _Converted]] = {
    "TensorBoard": _tensorboard,
    "ModelCheckpoint": _model_checkpoint,
    "EarlyStopping": _early_stopping,
    "CSVLogger": _csv_logger,
    "TerminateOnNaN": _terminate_on_nan,
    "ReduceLROnPlateau": _reduce_lr_on_plateau,
    "LearningRateScheduler": _learning_rate_scheduler,
    "BackupAndRestore": _backup_and_restore,
    "MlflowCallback": _mlflow_callback,
}


def from_keras(
    callbacks: Iterable[Any],
    *,
    bus: EventBus | None = None,
    keys: str | Iterable[str] | None = None,
    dashboard: bool = True,
    report: TextIO | None = None,
) -> list[Any]:
    """Turns a Keras callback list into one :class:`EventBusCallback` and its sinks.

    ``model.fit(x, y, callbacks=hookbus.from_keras([TensorBoard("logs"), CSVLogger("log.csv")]))``
    writes what the Keras callbacks write, at the same paths, through the bus: each Keras
    callback hookbus converts becomes a sink built from the callback's own arguments, attached to
    ``bus``, and the others pass through unchanged, in their order. The returned list holds the
    :class:`EventBusCallback` at the place of the first converted callback. One line on
    ``report`` (default: standard error) says which were converted and which passed through.

    Converted (each callback of exactly that class: a subclass is its own and passes through):

    - ``TensorBoard(log_dir, histogram_freq, update_freq)`` →
      ``TensorBoardSink(log_dir, layout="keras", ...)``: Keras's run directories (``train/``,
      ``validation/``), tags and steps. ``batch_<name>`` and ``evaluation_<name>_vs_iterations``
      are written for the published ``keys``.
    - ``EarlyStopping(monitor, min_delta, patience, mode, baseline, restore_best_weights)`` →
      ``EarlyStoppingSink``: ``val_<name>`` is read from fit's validation (``eval/<name>``),
      another name from the epoch's logs (``epoch/<name>``); Keras's rule, NaN never an
      improvement; the same weights restored. ``verbose`` is Keras's printing: hookbus gives
      the stop's reason as ``bus.stop_reason`` and in its summary.
    - ``ModelCheckpoint(filepath, monitor, save_best_only, save_weights_only, mode, save_freq,
      initial_value_threshold)`` → ``ExportSink(directory, filename=..., keep=None, ...)``: the
      same files at the same paths, named as Keras formats ``filepath`` (``{epoch}``,
      ``{batch}``, the logs' values), ``.keras`` (``model.save``) or ``.weights.h5``
      (``model.save_weights``); every epoch, every ``save_freq`` batches, or on improvement of
      ``monitor`` read from the epoch's logs. ``directory`` is the part of ``filepath`` before
      its first field; it also holds hookbus's lock file ``.export-<hash of the name>.lock``.
    - ``CSVLogger(filename, separator, append)`` → ``CSVSink(filename, epochs=True, ...)``:
      CSVLogger's columns, order and cells, after hookbus's ``step`` and ``wall_time``;
      ``append=False`` starts the file anew at each ``fit``, ``append=True`` adds each
      ``fit``'s rows (rows are keyed by step: a ``fit`` of a new model from step 0 keeps none).
    - ``TerminateOnNaN(raise_error)`` → ``NanGuardSink("loss", every_n_steps=1)``: a NaN or
      infinite loss stops ``fit`` after that batch (the epoch's record still goes out, as
      CSVLogger writes its row), or with ``raise_error=True`` raises there a
      ``NonFiniteError``, a ``RuntimeError`` as Keras's.

    - ``ReduceLROnPlateau(monitor, factor, patience, mode, min_delta, cooldown, min_lr)`` →
      ``ReduceLROnPlateauSink``, its monitor read as early stopping's.
    - ``LearningRateScheduler(schedule)`` → ``LearningRateSchedulerSink(schedule)``, a
      one-argument ``schedule(epoch)`` included (told apart by its signature, before training).

    - ``BackupAndRestore(backup_dir, save_freq, double_checkpoint, delete_checkpoint)`` →
      ``CheckpointSink(backup_dir, keep=1 or 2, delete_at_end=...)`` and the callback's
      ``restore=True``: TensorFlow checkpoints in ``backup_dir`` (not Keras's
      ``latest.weights.h5``), saved at each epoch end or every ``save_freq`` batches, a killed
      ``fit`` resumes from the latest at its epoch, and a finished one deletes them (a stop from
      outside, a signal, keeps them), so running the script again trains again.

    - MLflow's ``mlflow.keras.MlflowCallback(log_every_epoch, log_every_n_steps)`` →
      ``MLflowSink(mlflow.get_tracking_uri(), run_id=<the active run>, layout="keras",
      directory="hookbus-mlflow")``, ``every_n_steps=log_every_n_steps`` for step logging: what
      the callback logs, where it logs it (the run MLflow's fluent API has active when ``fit``
      begins, or one started then and left active, as the callback's first ``log_params`` starts
      it; the tracking URI as ``from_keras`` is called), the run never ended and no hookbus tag
      added. Its batch values are the published ``keys`` (name your compiled metrics);
      ``model_id`` is refused.

    ``verbose`` is Keras's printing: hookbus says the same in its summary and the dashboard.
    An argument hookbus cannot honour (``TensorBoard(write_images=True)``,
    ``EarlyStopping(start_from_epoch=2)``, ...) raises ``ValueError`` here, before training,
    naming the callback, the argument and its value.

    Args:
        callbacks: The Keras callback list (any iterable of callbacks).
        bus: The bus to attach the sinks to (default ``None``: a new :class:`EventBus` whose run
            opens when ``fit`` (or ``evaluate``) begins and closes when it ends, its files
            written and closed, so the same cell can run again; pass your own to subscribe
            functions, keep the run open across calls, or use ``with bus:``).
        keys: Keras log names the callback publishes on every due step (default ``None``:
            ``"loss"`` and the names the converted callbacks monitor). Name your compiled
            metrics (``["loss", "accuracy"]``) for ``TensorBoard(update_freq=...)``'s
            ``batch_accuracy`` and ``evaluation_accuracy_vs_iterations``.
        dashboard: Also attach a :class:`~hookbus.sinks.ConsoleSink`, what hookbus adds beside the
            files (default ``True``; pass ``verbose=0`` to ``fit`` for one display, or
            ``dashboard=False`` to keep Keras's progress bar alone).
        report: Where the one line goes (default ``None``: ``sys.stderr``).

    Returns:
        The list to pass as ``fit``'s (and ``evaluate``'s) ``callbacks``.

    Raises:
        ValueError: for an argument of a converted callback with no hookbus equivalent, or a
            sink's own check of a value (``CSVLogger(separator="")``).
        TypeError: ``callbacks`` is a string or not iterable.
    """
    if isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Iterable):
        raise TypeError(f"callbacks must be a list of Keras callbacks (got {type(callbacks).__name__})")
    flag("dashboard", dashboard)
    given = list(callbacks)
    converted: list[tuple[int, str, _Converted]] = []
    for index, callback in enumerate(given):
        name = _converter_name(callback)
        if name in _CONVERTERS:  # every argument is checked before anything is attached
            converted.append((index, name, _CONVERTERS[name](callback)))
    if not converted:
        _say(report, [], [_label(c) for c in given])
        return given
    log_names = ["loss"]
    for name in ([keys] if isinstance(keys, str) else list(keys or ())) + [
        n for _, _, c in converted for n in c.log_names
    ]:
        if name not in log_names:
            log_names.append(name)
    own = bus is None  # a bus only this list publishes on: closed as each fit ends (a notebook cell run again)
    bus = EventBus() if bus is None else bus
    restore = any(c.restore for _, _, c in converted)
    publisher = EventBusCallback(bus, keys=log_names, restore=restore, close_bus=own)
    for _, _, c in converted:
        for sink in c.sinks:
            bus.attach(sink)
    if dashboard:
        bus.attach(ConsoleSink())
    first = converted[0][0]
    done = {index for index, _, _ in converted}
    kept = [c for i, c in enumerate(given) if i not in done]
    result = [c for i, c in enumerate(given) if i < first and i not in done]
    result.append(publisher)
    result.extend(c for i, c in enumerate(given) if i > first and i not in done)
    _say(report, [name for _, name, _ in converted], [_label(c) for c in kept])
    return result


def _label(callback: Any) -> str:
    return type(callback).__name__


def _say(report: TextIO | None, converted: Sequence[str], passed: Sequence[str]) -> None:
    out = sys.stderr if report is None else report
    line = "hookbus.from_keras: converted " + (", ".join(converted) or "nothing")
    line += "; passed through " + (", ".join(passed) or "nothing")
    print(line, file=out)
