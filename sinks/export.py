"""ExportSink: the best (or the final) model for serving, exactly once through the checkpoint barrier."""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import shutil
import string
from typing import TYPE_CHECKING, Any, ClassVar

from hookbus.sink_api import (
    EPOCH_PREFIX,
    EVAL_PREFIX,
    ModelExported,
    OutputLock,
    Schedule,
    Sink,
    check_writable_dir,
)
from hookbus.validate import finite_number, flag, non_empty_path, positive_int

from ._monitor import MODES, Monitor, check_scalar

if TYPE_CHECKING:
    from collections.abc import Callable

    from hookbus.sink_api import Event, ModelExport, SinkContext

__all__ = ["ExportSink"]

logger = logging.getLogger("hookbus")

#: An export's name in the directory: its step, as TF Serving numbers a model's versions.
_VERSION = re.compile(r"^(\d+)(\.keras)?$")
#: An export being written, or one written and waiting for the checkpoint of its step.
_STAGED = ".tmp-"


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:12]


def check_filename(filename: str | None, weights_only: bool, keep: int | None) -> str | None:
    """``filename`` if it is a ``ModelCheckpoint`` file name template under the directory."""
    if filename is None:
        if weights_only:
            raise ValueError("weights_only=True writes Keras's .weights.h5 files: pass filename='<name>.weights.h5'")
        return None
    if not isinstance(filename, str) or not filename or os.path.isabs(filename):
        raise ValueError(f"filename must be a file name template under directory (got {filename!r})")
    ends = (".weights.h5",) if weights_only else (".keras", ".h5")
    if not filename.endswith(ends) or (not weights_only and filename.endswith(".weights.h5")):
        raise ValueError(
            f"filename must end in {' or '.join(ends)} with weights_only={weights_only} (got {filename!r}), "
            "as Keras's ModelCheckpoint requires"
        )
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(filename) if f is not None]
    except ValueError as error:
        raise ValueError(f"filename {filename!r} is no format template: {error}") from None
    if any(not f.isidentifier() for f in fields):
        raise ValueError(f"filename {filename!r} names fields that are not Keras log names: {fields}")
    if keep is not None:
        raise ValueError(f"filename= keeps every file, as ModelCheckpoint does: pass keep=None (got keep={keep!r})")
    return filename


class ExportSink(Sink):
    """Exports the model for serving: the best by ``monitor``, or without one the final model.

    What Keras's ``ModelCheckpoint(save_best_only=True)`` leaves (a ``.keras`` file
    ``keras.models.load_model`` opens without the training code) and what the Estimator's
    ``BestExporter`` / ``FinalExporter`` left (SavedModels for serving), from every publisher:
    under Keras ``fit`` (:class:`~hookbus.EventBusCallback`) a ``.keras`` file (``model.save``);
    under the TF1 hook a SavedModel whose ``serving_default`` signature maps
    ``EventBusHook(serving_inputs=..., serving_outputs=...)``; from a loop what
    ``LoopPublisher(serving=...)`` is (a Keras model's ``.keras`` file, a ``tf.Module``'s
    SavedModel). Each export is named after its step in ``directory`` (``directory/<step>.keras``
    or the SavedModel directory ``directory/<step>``, TF Serving's numbered versions), so the
    newest is the best so far; :attr:`latest` names it. ``directory`` holds only exports.

    With ``monitor``, a value that improves on the best so far exports the model at its step, by
    Keras's rule: strictly better (the first of equal bests is kept), non-finite values never
    export, ``mode="auto"`` through the one direction rule. Under ``fit`` the monitor is read as
    Keras's callbacks read it at an epoch end: an evaluation key (``"eval/loss"``, Keras's
    ``val_loss``) from ``fit``'s validation, an epoch key (``"epoch/..."``) from the epoch's
    logs, a training key (``"loss"``) as the epoch's value; elsewhere an evaluation key from each
    evaluation, a training key on the schedule given (``every_n_steps=``). Without ``monitor``,
    the model the training ends with is exported at its end (also after a stop).

    Exactly once, through the checkpoint barrier: an export is written at once beside its
    target (``directory/.tmp-<step>...``) and moved into place (one rename) when everything up
    to its step is flushed: at the barrier of the checkpoint that holds its step, or at the end
    of the session; its state (the best value and step) is saved beside that checkpoint. So
    after a kill, what ``directory`` shows is what the restored checkpoint has seen: at the
    resume, exports of later steps (and a kill's leftovers) are removed, and the steps trained
    again export again, once; a step is never exported twice. Without a checkpoint sink on the
    bus, exports appear at the end of each session (a kill before it leaves none). ``keep``
    exports are kept, the newest; older ones are deleted. Each flush that moved exports into place
    publishes ``model_exported`` for the newest (:class:`hookbus.sink_api.ModelExported`), which
    ``MLflowSink(log_model=True)`` ships as the run's artifact ``model``.

    ``ModelCheckpoint``'s own file names (under ``fit``): ``filename="ckpt-{epoch:02d}-{val_loss:.2f}.keras"``
    names each export in ``directory`` as Keras formats its ``filepath``: ``epoch`` the epoch
    counted from 1, ``batch`` (on a schedule) the batch in it counted from 1, and the values of
    Keras's logs by their Keras names (an epoch end's logs, ``val_*`` included; on a schedule
    the published training keys). A name made again is overwritten, as Keras overwrites it, and
    every file is kept (``keep=None``). ``every_epoch=True`` exports at every epoch end (Keras's
    ``save_best_only=False``); ``every_n_steps=N`` without ``monitor`` every N steps (Keras's
    ``save_freq=N``). ``weights_only=True`` writes the weights alone (``model.save_weights``, a
    ``.weights.h5`` file ``model.load_weights`` reads). The same barrier holds: each file moves
    into place once everything up to its step is flushed; at a resume, files of later steps
    are not known by their names (a name made again is overwritten).

    Args:
        directory: Where the exports go (created at begin; one writer at a time).
        monitor: The key whose improvements export (default ``None``: the final model only,
            or with ``every_epoch`` / a schedule, the model at each of them).
        mode: ``"auto"`` (default, as Keras's), ``"min"`` or ``"max"`` for ``monitor``.
        keep: How many exports to keep, the newest (default 5, the Estimator exporters'
            ``exports_to_keep``); ``None``: every one (needed with ``filename``).
        every_n_steps: When a training key ``monitor`` is compared (default: under
            ``fit`` each epoch end; elsewhere a training key needs one of them); with ``filename``
            and no ``monitor``, when the model is exported.
        every_n_secs: With ``every_n_steps``, above.
        name: Name in reports and in checkpoint state (default the class name).
        filename: A Keras ``ModelCheckpoint`` file name template under ``directory`` (default
            ``None``: ``<step>.keras``, TF Serving's numbered versions). Under ``fit`` only.
        every_epoch: Export at every epoch end of ``fit`` (default ``False``); no ``monitor``.
        weights_only: Write the weights alone, a ``.weights.h5`` file (default ``False``); under
            ``fit`` only, with ``filename`` ending ``.weights.h5``.
        initial_value_threshold: The best value before the first, as Keras's argument of that
            name (default ``None``: the first finite value exports).

    Raises:
        ValueError: at construction for invalid settings (``directory`` a file or not creatable,
            ``mode`` not one of the three, a schedule without ``monitor``); at begin when the
            training publisher offers no model to export (naming what to pass), no publisher
            provides ``monitor`` or declares it non-scalar, ``mode="auto"`` cannot tell its
            direction, or a training key has no schedule outside ``fit``.
    """

    #: Never due on a step: evaluations, epoch ends and the end come unscheduled.
    default_schedule: ClassVar[Schedule] = Schedule()
    default_runs_on: ClassVar[str] = "chief"
    #: An export that cannot be written stops the run, as ``ModelCheckpoint``'s does.
    on_error = "raise"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        monitor: str | None = None,
        mode: str = "auto",
        keep: int | None = 5,
        *,
        every_n_steps: int | None = None,
        every_n_secs: float | None = None,
        name: str | None = None,
        filename: str | None = None,
        every_epoch: bool = False,
        weights_only: bool = False,
        initial_value_threshold: float | None = None,
    ) -> None:
        path = non_empty_path("directory", directory)
        if monitor is not None and (not isinstance(monitor, str) or not monitor):
            raise ValueError(f"monitor must be a non-empty key or None (got {monitor!r})")
        if mode not in MODES:
            raise ValueError(f"mode must be 'min', 'max' or 'auto' (got {mode!r})")
        self._scheduled = every_n_steps is not None or every_n_secs is not None
        flag("every_epoch", every_epoch)
        flag("weights_only", weights_only)
        self.filename = check_filename(filename, weights_only, keep)
        self.every_epoch, self.weights_only = every_epoch, weights_only
        if every_epoch and (monitor is not None or self._scheduled):
            raise ValueError("every_epoch=True exports at every epoch end: pass no monitor and no schedule with it")
        threshold = initial_value_threshold
        if threshold is not None:
            threshold = finite_number("initial_value_threshold", threshold)
        self.initial_value_threshold = threshold
        if monitor is None and self._scheduled and filename is None:
            raise ValueError(
                "every_n_steps and every_n_secs say when a training key monitor is compared; without "
                "monitor= the final model is exported at the end (pass monitor=<key>, or no schedule)"
            )
        super().__init__(keys=monitor, every_n_steps=every_n_steps, every_n_secs=every_n_secs, name=name)
        self.monitor = monitor
        self._monitor = None if monitor is None else Monitor(monitor, mode)
        self.directory = os.path.abspath(path)
        if os.path.isfile(self.directory):
            raise ValueError(f"directory must be a directory, but {self.directory!r} is an existing file")
        check_writable_dir(self.directory, "directory")
        self.keep = None if keep is None else positive_int("keep", keep)
        # One writer per directory; with Keras's file names one per name template, so that two
        # ModelCheckpoints may share a directory (ckpt/best.keras and ckpt/last.keras) as in Keras.
        lock_name = ".export.lock" if filename is None else f".export-{_digest(filename)}.lock"
        lock_file = os.path.join(self.directory, lock_name)
        self._lock = OutputLock(self.directory, self.name, "the export directory", lock_file)
        #: Written, waiting for the flush of their step: (step, where it is, where it goes, what it is).
        self._pending: list[tuple[int, str, str, str]] = []
        self._latest: str | None = None
        self._start_clean()

    def _start_clean(self) -> None:
        self.best: float | None = self.initial_value_threshold
        self.best_step: int | None = None
        for _, staged, _, _ in self._pending:
            _remove(staged)
        self._pending = []

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        self._start_clean()  # a new run: the best comes back only from a checkpoint

    def handlers(self) -> dict[str, Callable[[Any], None]]:
        found = super().handlers()
        if self._monitor is None and not self._every:
            found.pop("after_run", None)  # the final model only: no event of any step concerns it
        return found

    @property
    def _every(self) -> bool:
        """Exports at every epoch end or on a schedule, improvement or not (``ModelCheckpoint``)."""
        return self.every_epoch or (self._monitor is None and self._scheduled)

    @property
    def receives_epochs(self) -> bool:
        """Under ``fit``: an epoch key, or a training key by its epoch value (without a schedule)."""
        key = self.monitor
        if self.every_epoch:
            return True
        if key is None or key.startswith(EVAL_PREFIX):
            return False
        return key.startswith(EPOCH_PREFIX) or not self._scheduled

    @property
    def latest(self) -> str | None:
        """The newest export in ``directory`` (the best so far, with ``monitor``), or ``None``."""
        if self.filename is not None:
            return self._latest  # Keras's names tell no order: the newest this sink moved into place
        versions = self._versions()
        return versions[-1][1] if versions else None

    # -- lifecycle ---------------------------------------------------------------------------
    def on_begin(self, event: Event) -> None:
        if event.mode != "train":
            return
        context = self.context
        if self.weights_only or self.filename is not None:
            if not context.model().ends_epochs() or (self.weights_only and context.model().weights_export() is None):
                raise ValueError(
                    f"{self.name}: filename= and weights_only=True write what Keras's ModelCheckpoint writes, "
                    "and need EventBusCallback under Keras fit"
                )
        elif context.model().export() is None:
            raise ValueError(
                f"{self.name} needs a training publisher that can write its model for serving: EventBusCallback "
                "(a .keras file), EventBusHook(..., serving_inputs={name: input tensor}, serving_outputs={name: "
                "output tensor}) or LoopPublisher(..., serving=<a Keras model or a tf.Module>) (a SavedModel); "
                "the training publisher on this bus offers none"
            )
        monitor = self._monitor
        if monitor is not None:
            check_scalar(self.name, monitor.key, context.static_shape(monitor.key))
            self._monitor = monitor.settled(self.name, context.model().direction)
            training_key = not monitor.key.startswith((EVAL_PREFIX, EPOCH_PREFIX))
            if training_key and not self._scheduled and not context.model().ends_epochs():
                raise ValueError(
                    f"{self.name} monitors the training key {monitor.key!r}, compared outside Keras fit on a "
                    "schedule: pass every_n_steps=<n> (or every_n_secs=), or monitor an evaluation key (eval/...)"
                )
        os.makedirs(self.directory, exist_ok=True)
        self._lock.acquire()  # one writer per directory, before step 1
        waiting = {staged for _, staged, _, _ in self._pending}
        for entry in os.listdir(self.directory):
            path = os.path.join(self.directory, entry)
            if entry.startswith(_STAGED) and path not in waiting:
                _remove(path)  # an export a killed process had not moved into place

    def on_session_created(self, event: Event) -> None:
        if event.mode != "train":
            return
        # A resume point at S: exports of later steps are not in the checkpoint's past (the states
        # beside it do not know them); the steps trained again export again.
        step = event.step
        for _, staged, _, _ in [p for p in self._pending if p[0] > step]:
            _remove(staged)
        self._pending = [p for p in self._pending if p[0] <= step]
        later_versions = [path for s, path in self._versions() if s > step]
        if later_versions:
            logger.warning(
                "%s: removing %d export(s) of steps after %d, where this session starts (%s); the steps trained "
                "again export again",
                self.name,
                len(later_versions),
                step,
                ", ".join(os.path.basename(p) for p in later_versions),
            )
            for path in later_versions:
                _remove(path)

    def on_after_run(self, event: Event) -> None:
        monitor = self._monitor
        if monitor is None:  # every epoch end, or every scheduled step (handlers())
            if event.mode == ("epoch" if self.every_epoch else "train") and not event.final:
                self._write(event.step, "an epoch end" if self.every_epoch else "its schedule", event)
            return
        value = self._monitored(monitor, event)
        if value is None or not math.isfinite(value) or not monitor.is_improvement(value, self.best):
            return
        self.best, self.best_step = value, event.step
        self._write(event.step, f"{monitor.key}={value:.6g}", event)

    def _monitored(self, monitor: Monitor, event: Event) -> float | None:
        """The monitored value ``event`` carries, where this monitor is read from that kind of event."""
        key = monitor.key
        if key.startswith(EVAL_PREFIX):
            return monitor.value(event.values) if event.mode == "eval" else None
        if key.startswith(EPOCH_PREFIX):
            return monitor.value(event.values) if event.mode == "epoch" else None
        if event.mode == "epoch":  # a training key, at an epoch end: the epoch's value, as Keras reads it
            return None if self._scheduled else monitor.value({key: event.values.get(EPOCH_PREFIX + key)})
        return monitor.value(event.values) if event.mode == "train" and not event.final else None

    def on_end(self, event: Event) -> None:
        if event.mode == "train" and self._monitor is None and not self._every:
            self._write(event.step, "the final model")

    # -- writing -------------------------------------------------------------------------------
    def _write(self, step: int, why: str, event: Event | None = None) -> None:
        """Write the model of ``step`` beside its target; it moves into place at the next flush."""
        context = self.context
        view = context.model()
        export: ModelExport | None = view.weights_export() if self.weights_only else view.export()
        if export is None or not export.ready or context.current_step() != step:
            logger.warning(
                "%s: no live model of step %d to export (%s): the training publisher's model %s",
                self.name,
                step,
                why,
                "cannot be written now" if export is None or not export.ready else "has trained on since",
            )
            return
        if self.filename is not None:
            target = os.path.join(self.directory, self._named(step, event))
            if any(p[0] == step for p in self._pending):
                return  # once per step; a name made again at a later step is overwritten, as Keras does
            os.makedirs(os.path.dirname(target), exist_ok=True)
            staged = os.path.join(os.path.dirname(target), f"{_STAGED}{step}-{os.path.basename(target)}")
        else:
            target = os.path.join(self.directory, f"{step}{export.suffix}")
            if os.path.lexists(target) or any(p[0] == step for p in self._pending):
                return  # exported already (a resume at the step of an export): once per step
            staged = os.path.join(self.directory, f"{_STAGED}{step}{export.suffix}")
        _remove(staged)
        try:
            export.export(staged)
        except BaseException:
            _remove(staged)
            raise
        self._pending.append((step, staged, target, export.kind))
        logger.info("%s: wrote %s of step %d (%s)", self.name, export.kind, step, why)

    def _named(self, step: int, event: Event | None) -> str:
        """``filename`` formatted as Keras's ModelCheckpoint formats its ``filepath``."""
        assert self.filename is not None
        values = {} if event is None else event.values
        if event is not None and event.mode == "epoch":
            logs = {k[len(EPOCH_PREFIX) :]: v for k, v in values.items() if k.startswith(EPOCH_PREFIX)}
            logs["epoch"] = int(values["epoch"]) + 1
        else:
            logs = {k: v for k, v in values.items() if "/" not in k and isinstance(v, float)}
            progress = self.context.model().progress()
            epoch, start = (1, 0) if progress is None else (progress.epoch, progress.epoch_start)
            if start is None and progress is not None:
                start = (progress.epoch - 1) * (progress.steps_per_epoch or 0)
            logs.update(epoch=epoch, batch=step - (start or 0))
        try:
            return self.filename.format(**logs)
        except (KeyError, ValueError) as error:  # a name Keras's logs do not hold at this step, a bad format
            raise ValueError(
                f"{self.name}: cannot make a file name of {self.filename!r} at step {step}: {error!r}; "
                f"the values here are {sorted(logs)}"
            ) from None

    def flush(self) -> None:
        """Move the exports written up to now into place (the checkpoint barrier, a session's end),
        delete the oldest beyond ``keep``, then publish ``model_exported`` for the newest."""
        pending, self._pending = self._pending, []
        for step, staged, target, _ in pending:
            os.replace(staged, target)  # atomic, for a file and for a SavedModel directory alike
            logger.info("%s: exported step %d to %s", self.name, step, target)
        if pending:
            if self.filename is None and self.keep is not None:
                for _, path in self._versions()[: -self.keep]:
                    _remove(path)
            step, _, target, kind = pending[-1]
            self._latest = target
            self.context.announce_export(ModelExported(target, step, kind))

    def _versions(self) -> list[tuple[int, str]]:
        """The exports in ``directory``, oldest first, by step."""
        if not os.path.isdir(self.directory):
            return []
        found = [(int(m.group(1)), e) for e in os.listdir(self.directory) if (m := _VERSION.match(e))]
        return [(step, os.path.join(self.directory, entry)) for step, entry in sorted(found)]

    def close(self) -> None:
        """Drop exports not moved into place (the run raised: its checkpoint's past has them not),
        and let another run write ``directory``; idempotent."""
        for _, staged, _, _ in self._pending:
            _remove(staged)
        self._pending = []
        self._lock.release()

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self._monitor is None:
            return {}
        return {"best": self.best, "best_step": self.best_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        best, best_step = state.get("best"), state.get("best_step")
        self.best = None if best is None else float(best)
        self.best_step = None if best_step is None else int(best_step)

    def status(self) -> str:
        if self._monitor is None:
            return "export: the final model at the end"
        best = "none yet" if self.best is None else f"best {self.best:.6g} @ {self.best_step}"
        return f"export: {self._monitor.key} {best}"
