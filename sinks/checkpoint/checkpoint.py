"""CheckpointSink: saves the model behind the checkpoint barrier, keeps the last and the best."""

from __future__ import annotations

import logging
import os
import shutil
from typing import TYPE_CHECKING, ClassVar

from hookbus.sink_api import (
    EPOCH_PREFIX,
    EVAL_PREFIX,
    CheckpointSaved,
    OutputLock,
    Priority,
    Schedule,
    Sink,
    UnknownKeyError,
    check_writable_dir,
    did_you_mean,
    how_ended,
    step_of,
)
from hookbus.validate import flag, non_negative_int, positive_int

from .._finite import find_nonfinite
from .._monitor import Monitor, check_scalar
from ._best import BestCheckpoints
from ._schedule import NOT_GIVEN, DefaultSchedule, given_schedule
from ._start import fall_back_from_unreadable, prune_leftovers

if TYPE_CHECKING:
    from hookbus.sink_api import CheckpointStore, Event, SinkContext, StopRequest

__all__ = ["CheckpointSink"]

logger = logging.getLogger("hookbus")


#: How a training ended that ``delete_at_end`` deletes after: it did what it was asked.
_FINISHED = "finished"


class CheckpointSink(Sink):
    """Saves checkpoints on a schedule, at the end and on a stop request (``CheckpointSaverHook``).

    This sink decides when to save and what to keep; the bus runs the checkpoint barrier
    (docs/guides/sinks/checkpoints.md "Checkpoints, resume and the barrier"): control sinks may veto, every
    live sink is flushed (a writer that cannot flush and isolates its errors is disabled, not
    fatal) and its ``state_dict()`` collected; the
    publisher's backend writes the model and the states go beside it (``<prefix>.hookbus.json``,
    by sink name); then the ``checkpoint`` pointer names it, older checkpoints beyond ``keep``
    are deleted and ``checkpoint_saved`` is published. A save runs after the step reached every
    subscriber, never twice for one step, never from a step with a non-finite value. On
    ``session_created`` from a checkpoint of ``directory`` the saved sink states are loaded back.

    Multi-worker: in parameter-server training only the chief saves (``runs_on="chief"``).
    Under ``MultiWorkerMirroredStrategy`` every worker saves, as TensorFlow requires there: the
    chief into ``directory``, the others into a scratch directory
    (``directory/.hookbus-tmp-<task>``) that is removed after each save; retention, the
    pointer and ``checkpoint_saved`` are the chief's. The saves must fall on the same steps on
    every worker, so there the schedule must be ``every_n_steps`` only (``every_n_secs=None``),
    and a stop saves at the end the workers agreed on, not at the request. ``directory`` must be
    on storage every worker reads (each restores from it).

    Args:
        directory: Where checkpoints go (pass the same as the session's ``checkpoint_dir``).
        every_n_steps: Save when the step reaches a new multiple (default ``None``).
        every_n_secs: Save when this many seconds have passed, counted from each session's start
            (a fresh start or a resume does not save at its first step). Default, when no
            schedule argument is given: under Keras ``fit``, at each epoch end (each epoch event
            of :class:`~hookbus.EventBusCallback`), as ``ModelCheckpoint`` and
            ``BackupAndRestore`` save; elsewhere (the TF1 hook, the loop publisher) every 600
            seconds. Schedule arguments replace the default as a whole: ``every_n_steps=500``
            alone saves on steps only, also under ``fit``; with both, whichever comes first.
            ``every_n_steps=None, every_n_secs=None`` saves only at the end of each session and
            when a stop is requested.
        keep: How many recent checkpoints to keep, across restarts (default 5).
        keep_best: Also keep this many best checkpoints by ``monitor`` in ``directory/best``
            (default 0: off). Under the epoch default, a training key ranks each epoch end by
            the epoch's value (``epoch/<key>``, as ``ModelCheckpoint`` ranks by epoch logs).
        monitor: The key ranking checkpoints for ``keep_best`` (default ``None``); also
            reported in ``checkpoint_saved``.
        mode: ``"auto"`` (default, as Keras's), ``"min"`` or ``"max"`` for ``monitor``: the one
            direction rule, as :class:`~hookbus.sinks.EarlyStoppingSink`'s (``eval/accuracy``
            ranks highest first); with ``keep_best``, where nothing tells, ``begin`` fails
            asking for ``mode=``.
        basename: Checkpoint file prefix (default ``"model.ckpt"``, files ``model.ckpt-<step>``).
        name: Name in reports (default the class name).
        delete_at_end: When a training finishes (its end reached with no stop from outside: no
            signal, no Ctrl-C), delete the checkpoints of ``directory`` (``best/`` aside) and
            empty the pointer instead of saving, as ``BackupAndRestore(delete_checkpoint=True)``
            deletes its backup: the next run of the script trains again. A run stopped from
            outside keeps them to resume from (default ``False``).

    Raises:
        ValueError: at construction for invalid settings; at ``begin`` without a publisher that
            provides a checkpoint backend, when two stateful sinks share a name, when no
            publisher provides ``monitor`` (or declares it non-scalar), or when ``keep_best``'s
            ``mode="auto"`` cannot tell which way ``monitor`` goes. ``directory`` that is a
            file or cannot be created fails at construction.
    """

    default_schedule: ClassVar[Schedule] = Schedule(every_n_secs=600, secs_from_session_start=True)
    #: The default under Keras ``fit``: never due on a step; each epoch event saves.
    epoch_schedule: ClassVar[Schedule] = Schedule()
    #: Parameter-server training: only the chief saves (``chief_only_hooks``), at the shared global step.
    default_runs_on: ClassVar[str] = "chief"
    #: Under MultiWorkerMirroredStrategy every worker saves (the non-chiefs into a scratch directory).
    joins_collectives: ClassVar[bool] = True
    priority = Priority.CHECKPOINT
    on_error = "raise"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        every_n_steps: int | None = None,
        every_n_secs: float | None = NOT_GIVEN,
        keep: int = 5,
        keep_best: int = 0,
        monitor: str | None = None,
        mode: str = "auto",
        *,
        basename: str = "model.ckpt",
        name: str | None = None,
        delete_at_end: bool = False,
    ) -> None:
        if not isinstance(directory, str | os.PathLike) or not os.fspath(directory):
            raise ValueError(f"directory must be a non-empty path (got {directory!r})")
        #: No schedule argument given: the default, chosen at each train begin (epochs under fit).
        defaulted = every_n_steps is None and every_n_secs is NOT_GIVEN
        self._default = DefaultSchedule(self.default_schedule, self.epoch_schedule) if defaulted else None
        self._pending_best: tuple[int, float] | None = None  # an evaluation waiting for its epoch's save
        every_n_steps, every_n_secs, at_end = given_schedule(every_n_steps, every_n_secs)
        super().__init__(every_n_steps=every_n_steps, every_n_secs=every_n_secs, at_end=at_end, name=name)
        self.schedule = Schedule(every_n_steps, every_n_secs, at_end=at_end, secs_from_session_start=True)
        self.directory = os.path.abspath(os.fspath(directory))
        if os.path.isfile(self.directory):
            raise ValueError(f"directory must be a directory, but {self.directory!r} is an existing file")
        check_writable_dir(self.directory, "directory")
        self.best_directory = os.path.join(self.directory, "best")
        self.keep = positive_int("keep", keep)
        self.keep_best = non_negative_int("keep_best", keep_best)
        if monitor is not None and (not isinstance(monitor, str) or not monitor):
            raise ValueError(f"monitor must be a non-empty key or None (got {monitor!r})")
        if self.keep_best and monitor is None:
            raise ValueError(f"keep_best={keep_best} needs monitor=<key> to rank checkpoints by")
        self.monitor = monitor
        self._monitor = None if monitor is None else Monitor(monitor, mode)
        if not isinstance(basename, str) or not basename or os.sep in basename:
            raise ValueError(f"basename must be a file name (got {basename!r})")
        self.basename = basename
        flag("delete_at_end", delete_at_end)
        self.delete_at_end = delete_at_end
        self._stop: StopRequest | None = None  # the run's first stop request: how it ends
        self._kept: list[str] = []
        self._best = BestCheckpoints(self._monitor, self.keep_best) if self._monitor and self.keep_best else None
        self._saved: set[int] = set()
        self._nonfinite_step: int | None = None
        self._resumed = False  # whether a session_created has been seen: the first may load states
        self._scratch: str | None = None  # a collective non-chief's save directory, removed after each save
        self._collective = False
        self._repaired = False  # the directory was repaired since the lock was taken (on_begin)
        lock_file = os.path.join(self.directory, ".checkpoint.lock")
        self._lock = OutputLock(self.directory, self.name, "the checkpoint directory", lock_file)

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def checkpoint_directory(self) -> str:
        return self.directory

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        # A new run: its first restored session loads the states beside the checkpoint it restored.
        self._resumed, self._nonfinite_step, self._pending_best = False, None, None
        self._stop = None

    @property
    def receives_epochs(self) -> bool:
        """With the default schedule: under Keras ``fit`` each epoch event saves."""
        return self._default is not None

    @property
    def _at_epochs(self) -> bool:
        """Whether the schedule now is the default's each epoch end (under ``fit``)."""
        return self._default is not None and self._default.at_epochs

    def _choose_default(self) -> None:
        """The default schedule for this publisher: each epoch end under ``fit``, else by time."""
        chosen = self._default.choose(self.context.model().ends_epochs()) if self._default is not None else None
        if chosen is not None:
            self.schedule = chosen
            self.context.reschedule(chosen)

    def on_begin(self, event: Event) -> None:
        if event.mode != "train":
            return
        context = self.context
        self._choose_default()
        if not context.checkpoints.offered:
            raise ValueError(
                f"{self.name} needs a publisher that provides a checkpoint backend (a train-mode "
                "EventBusHook, the Keras callback or the loop publisher) on the same bus"
            )
        if self.monitor is not None:
            if self.monitor not in context.known_keys:
                raise UnknownKeyError(
                    f"{self.name} monitors {self.monitor!r}, which no publisher attached to this bus "
                    f"provides{did_you_mean(self.monitor, context.known_keys)}; "
                    f"known keys: {sorted(context.known_keys)}"
                )
            check_scalar(self.name, self.monitor, context.static_shape(self.monitor))
        if self._best is not None and self._monitor is not None:  # the direction ranks only keep_best
            self._monitor = self._best.monitor = self._monitor.settled(self.name, context.model().direction)
        context.checkpoints.check_state_names()
        task = context.task
        self._collective = task is not None and task.collective
        self._scratch = None
        if task is not None and task.collective:
            if self.schedule.every_n_secs is not None:
                raise ValueError(
                    f"{self.name}: under MultiWorkerMirroredStrategy every worker saves, at the same "
                    f"steps, so the schedule must count steps (got every_n_secs={self.schedule.every_n_secs!r}); "
                    "pass every_n_steps=<n> and every_n_secs=None"
                )
            if not task.is_chief:
                self._scratch = os.path.join(self.directory, f".hookbus-tmp-{task.suffix}")
        os.makedirs(self.directory, exist_ok=True)
        if self._scratch is None and not (self._repaired and self._lock.held):  # the one process that writes
            self._lock.acquire()  # one writer per directory, before step 1
            # What earlier processes left: an unreadable latest, checkpoints a kill did not prune.
            # Once while the lock is held: later begins of the run (every Keras fit) find the
            # directory as this sink left it, and need not read the latest checkpoint back again.
            fall_back_from_unreadable(self.name, self.directory, context.checkpoints)
            prune_leftovers(self.name, ((self.directory, self.keep), (self.best_directory, None)), context.checkpoints)
            self._repaired = self._lock.held  # a file system that cannot lock: repaired at every begin
        # The disk is the truth: this also recovers what earlier processes saved, so keep holds.
        store = context.checkpoints.store
        self._kept = store.checkpoints(self.directory)
        if self._best is not None:
            self._best.load(store, self.best_directory)
        self._saved = {s for s in map(step_of, self._kept) if s is not None}

    def close(self) -> None:
        """Let another run save into ``directory`` (the one-writer lock); idempotent."""
        self._repaired = False  # another process may write it before the next begin: repair again then
        self._lock.release()

    def on_session_created(self, event: Event) -> None:
        if event.mode != "train":
            return
        if self._nonfinite_step is not None and event.step < self._nonfinite_step:
            self._nonfinite_step = None
        first, self._resumed = not self._resumed, True
        # In-memory state is newer than any checkpoint unless this process starts from one or the
        # step went back: the train/evaluate loop must keep what the evaluation at S added.
        if not event.restored or not (first or event.rewound):
            return
        restored = self._restored(event.step)
        data = self._store().read_state(restored) if restored is not None else None
        if data is not None:
            self.context.checkpoints.load_states(data.get("sinks", {}))

    def _restored(self, step: int) -> str | None:
        """The checkpoint a session that read ``step`` restored: the one of that step; under parameter
        servers, where the workers move the global step on between TensorFlow's restore and this read,
        the pointer's latest (what the chief's session creator restores) when it is below ``step``."""
        kept = self._kept
        at_step = [p for p in kept if step_of(p) == step]
        if at_step:
            return at_step[-1]
        task = self.context.task
        latest = step_of(kept[-1]) if kept else None
        if task is None or task.collective or latest is None or latest > step:
            return None
        logger.info(
            "%s: the session restored %s; the global step read after it is %d (the workers trained on)",
            self.name,
            kept[-1],
            step,
        )
        return kept[-1]

    def on_after_run(self, event: Event) -> None:
        if event.mode == "epoch" and not self._at_epochs:
            return  # epoch events save only under the epoch default
        defer = self.context.defer
        if find_nonfinite(event.values, event.values) is not None:
            training = event.mode in ("train", "epoch")
            if training and (self._nonfinite_step is None or event.step < self._nonfinite_step):
                self._nonfinite_step = event.step
            return
        value = self._monitored(event)
        step = event.step
        if event.mode in ("train", "epoch") and not event.final:
            defer(lambda: self._save(step, value))
        elif event.mode == "eval" and self._kept and step_of(self._kept[-1]) == step and self._scratch is None:
            # An evaluation of the latest checkpoint's step (Keras's validation at an epoch end)
            # changed the sinks' states: write them beside it again, so a resume neither misses
            # it nor trains on after an early stop it decided.
            latest = self._kept[-1]
            defer(lambda: self.context.checkpoints.mark_evaluated(latest))
        if event.mode == "epoch":
            self._consider_pending()  # after this epoch's save: a copy of it
        if value is None or not self.keep_best:
            return
        if event.mode == "eval" and self._at_epochs:
            # fit's validation comes just before its epoch event, whose save the best then copies
            # (with EventBusCallback(every_n_epochs=n > 1) an epoch may have none: said then).
            self._consider_pending()
            self._pending_best = (step, value)
        else:
            defer(lambda: self._consider_best(step, value))

    def _monitored(self, event: Event) -> float | None:
        """The monitored value ``event`` carries; at an epoch end, a training key's epoch value."""
        monitor = self._monitor
        if monitor is None:
            return None
        if event.mode == "epoch" and not monitor.key.startswith((EVAL_PREFIX, EPOCH_PREFIX)):
            return monitor.value({monitor.key: event.values.get(EPOCH_PREFIX + monitor.key)})
        return monitor.value(event.values)

    def on_stop_requested(self, event: StopRequest) -> None:
        self._stop = self._stop or event
        if self.delete_at_end and how_ended(event, None) == _FINISHED:
            return  # a training that finishes this way deletes its checkpoints at the end: no save
        if not self._collective:  # collective: the workers may ask at different steps; save at the end
            self._save_if_live()  # the step has reached every subscriber already

    def on_end(self, event: Event) -> None:
        if event.mode == "train" and self.delete_at_end and how_ended(self._stop, None) == _FINISHED:
            self.context.defer(self._delete_all)
        elif event.mode == "train":
            self.context.defer(self._save_if_live)
            self._consider_pending()

    def _delete_all(self) -> None:
        """A finished training's end with ``delete_at_end``: no checkpoint left to resume from."""
        if self._context is None or self._scratch is not None:
            return  # a collective non-chief keeps no files of its own
        found = list(dict.fromkeys([*self._store().checkpoints(self.directory), *self._kept]))
        self.context.checkpoints.keep_only(self.directory, [], found)
        self._kept = []
        logger.info("%s: the training finished: deleted %d checkpoint(s) in %s", self.name, len(found), self.directory)

    def _consider_pending(self) -> None:
        pending, self._pending_best = self._pending_best, None
        if pending is not None:
            self.context.defer(lambda: self._consider_best(*pending))

    # -- saving --------------------------------------------------------------------------------
    def _store(self) -> CheckpointStore:
        """The publisher's checkpoint store: every file this sink lists, reads or moves."""
        return self.context.checkpoints.store

    def _save_if_live(self) -> None:
        if self._context is not None and self._context.checkpoints.ready:
            self._save(self._context.current_step(), None)

    def _savable(self, step: int) -> bool:
        if self._context is None:
            return False
        return self._nonfinite_step is None or step < self._nonfinite_step

    def _write(self, directory: str, step: int, value: float | None) -> str | None:
        """The bus's barrier for a checkpoint of ``step`` in ``directory``, up to the pointer;
        its prefix (``None``: vetoed, or the step it holds is already saved)."""
        prefix = os.path.join(directory, f"{self.basename}-{step}")
        taken = self._saved if directory == self.directory else ()
        return self.context.checkpoints.save(step, prefix, value, taken)

    def _write_scratch(self, step: int, value: float | None) -> None:
        """A collective non-chief's save: the same write as the chief's, into a directory then removed."""
        assert self._scratch is not None
        try:
            self._write(self._scratch, step, value)
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _save(self, step: int, value: float | None) -> None:
        if step in self._saved or not self._savable(step):
            return
        if self._scratch is not None:
            # A collective non-chief keeps the chief's bookkeeping (same paths, no files) so that
            # its later decisions (keep_best) match the chief's.
            self._write_scratch(step, value)
            self._kept = [*self._kept, os.path.join(self.directory, f"{self.basename}-{step}")][-self.keep :]
            self._saved.add(step)
            return
        path = self._write(self.directory, step, value)
        if path is None:
            return
        held = step_of(path) or step
        kept = [*self._kept, path]
        self.context.checkpoints.keep_only(self.directory, kept[-self.keep :], kept[: -self.keep])
        self._kept = kept[-self.keep :]
        self._saved.update((step, held))
        self._publish(path, held, value)

    def _consider_best(self, step: int, value: float) -> None:
        assert self._best is not None
        if not self._best.admits(step, value):
            return
        regular = [p for p in self._kept if step_of(p) == step]
        chief = self._scratch is None  # a collective non-chief only joins the save, if one is written
        if regular:
            target = os.path.join(self.best_directory, os.path.basename(regular[-1]))
            path = target
            if chief:
                store = self._store()
                path = store.copy(regular[-1], self.best_directory)
                # The ranking is recovered from each best checkpoint's value after a restart; the
                # regular checkpoint may have been saved without it (an evaluation's key).
                store.write_state(path, {**(store.read_state(path) or {}), "value": value})
        elif self._savable(step) and self.context.current_step() == step and self.context.checkpoints.ready:
            if chief:
                written = self._write(self.best_directory, step, value)
                if written is None:
                    return
                path = written
            else:
                self._write_scratch(step, value)
                path = os.path.join(self.best_directory, f"{self.basename}-{step}")
        else:
            logger.warning("%s: no checkpoint of step %d to keep as best (%s=%g)", self.name, step, self.monitor, value)
            return
        dropped = self._best.add(value, path)
        if chief:
            self.context.checkpoints.keep_only(self.best_directory, self._best.paths, dropped)
            self._publish(path, step, value)

    def _publish(self, path: str, step: int, value: float | None) -> None:
        self.context.checkpoints.publish(CheckpointSaved(path, step, value))

    @property
    def best_checkpoint(self) -> str | None:
        """The prefix of the best checkpoint kept in ``directory/best``, if any."""
        return self._best.best if self._best is not None else None
