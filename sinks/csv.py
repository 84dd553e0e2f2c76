"""CSVSink: one row per step of scalar values, train, eval and test in sibling files, resumable."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from hookbus.sink_api import (
    DEFAULT_FLUSH_DEADLINE,
    EPOCH_PREFIX,
    EVAL_PREFIX,
    SYSTEM_PREFIX,
    TEST_PREFIX,
    Event,
    Schedule,
    Sink,
    WriterKit,
    WriterStats,
)
from hookbus.validate import flag

from ._csv_file import CSVFile, Row, check_separator

__all__ = ["CSVSink"]

logger = logging.getLogger("hookbus")

#: What the training thread hands the writer: the file (``"train"``, ``"eval"``, ``"test"``, ``"epoch"``), the
#: step, the wall time and the event's read-only values (an epoch's row already made); the writer
#: thread makes the row (:meth:`CSVSink._row`).
Item = tuple[str, int, float, Mapping[str, Any]]


class CSVSink(Sink):
    """Writes scalar values as CSV: train rows to ``path``, eval rows to ``<stem>.eval.csv``, test
    evaluations to ``<stem>.test.csv``.

    Columns are ``step``, ``wall_time`` and one per scalar key (eval and test keys without their
    ``eval/`` or ``test/`` prefix), fixed at begin from the publishers' keys; a key first seen later rewrites
    the file atomically with a wider header (old rows keep their values, new cells stay empty).
    A start that keeps no row of an existing file (a fresh training at that path, other keys
    included) writes a header of this run's columns alone; a resume keeps its rows' columns too,
    empty in the new rows, and says which of them this run does not write.
    Each file holds at most one row per step. Every session start at step S is a resume point:
    rows with step > S, and a last line torn by a kill, are dropped before appending. NaN and
    infinities are written ``nan``, ``inf``, ``-inf``. Arrays and bytes are not written.

    A test evaluation (``model.evaluate`` outside ``fit`` under :class:`hookbus.EventBusCallback`:
    ``mode="test"``, keys ``test/<name>``) is one row of ``<stem>.test.csv`` at the training step it
    evaluated, whatever the schedule. That file only grows: every evaluation is a row (two of the
    same step included), no session start drops one, and no evaluation touches the train or eval
    file. It is made by the first test evaluation (and locked then), never by training.

    Rows are written by a :class:`hookbus.sink_api.BackgroundWriter` thread, which the sink's
    :class:`hookbus.sink_api.WriterKit` (``self.output``) starts at begin; :meth:`flush` (the checkpoint
    barrier) blocks until they are handed to the OS.

    Args:
        path: The train file (``str`` or path-like); its directory is created at begin.
        every_n_steps: Write every n steps. Default: every 10 steps when no schedule argument is
            given; schedule arguments replace the default as a whole (``every_n_secs=3600`` alone
            writes by time only).
        keys: Keys to write (default ``None``: every scalar key).
        every_n_secs: Also (or instead) write every t seconds (default ``None``).
        flush_secs: Longest time rows stay unflushed (default 5.0).
        max_queue_size: Rows that may wait before training blocks (default 1024).
        close_deadline: Seconds ``close`` waits for the writer (default 10.0).
        flush_deadline: Seconds a flush (the checkpoint barrier, a session's end) may wait for
            the disk (default 30.0); past it the sink is reported with its path and the rows it
            could not write, and disabled, and training and the checkpoint go on.
        epochs: Write one row per epoch event of :class:`hookbus.EventBusCallback` instead of
            per step (default ``False``): columns ``step``, ``wall_time``, ``epoch``, then the
            epoch-level values without their ``epoch/`` prefix (``accuracy``, ``loss``,
            ``val_loss``, ...), the rows ``keras.callbacks.CSVLogger`` writes (its columns in its
            order, ``val_*`` ones included when the first epoch has none, and ``NA`` where an
            epoch has no value, as it writes); no eval file.
            ``keys`` then names ``epoch/`` keys (default ``None``: all). Without it, ``epoch/``
            keys are not written.
        priority: Order among subscribers, lower first (see :class:`hookbus.sink_api.Sink`).
        on_error: ``"raise"``, ``"isolate"`` (default) or ``"disable"``.
        name: Shown in reports (default the class name).
        runs_on: Multi-worker training: ``"chief"`` (default), ``"all"`` or ``"each"`` (every
            worker writes ``<stem>.worker-<i><suffix>``). Rows are keyed by ``event.step``, the
            shared global step.
        separator: The character between cells (default ``","``), as ``CSVLogger(separator=)``:
            one ASCII character that no cell holds (``";"``, a tab, ...).
        append: What a training (a ``fit``, a session loop) does with the file it finds
            (default ``True``): keep its rows up to the step the training starts at and add its
            own: a resume from a checkpoint writes every step once, and a second ``fit`` of the
            model adds its rows, as ``CSVLogger(append=True)`` (rows are keyed by step: a training
            from step 0 keeps none). ``False``: start the file anew at each training's start, a
            resume's included, as ``CSVLogger(append=False)`` does at each ``fit``.
        system: Also write the machine's samples to ``<stem>.system.csv`` (default ``False``).
    """

    default_schedule: ClassVar[Schedule] = Schedule(every_n_steps=10)
    default_runs_on: ClassVar[str] = "chief"

    def __init__(
        self,
        path: str | os.PathLike[str],
        every_n_steps: int | None = None,
        keys: str | Iterable[str] | None = None,
        *,
        every_n_secs: float | None = None,
        flush_secs: float = 5.0,
        max_queue_size: int = 1024,
        close_deadline: float = 10.0,
        flush_deadline: float = DEFAULT_FLUSH_DEADLINE,
        epochs: bool = False,
        priority: int | None = None,
        on_error: str | None = None,
        name: str | None = None,
        runs_on: str | None = None,
        separator: str = ",",
        append: bool = True,
        system: bool = False,
    ) -> None:
        super().__init__(
            keys=keys,
            every_n_steps=every_n_steps,
            every_n_secs=every_n_secs,
            priority=priority,
            on_error=on_error,
            name=name,
            runs_on=runs_on,
        )
        self._base_path = self.path = WriterKit.file_path("path", path)
        self.eval_path = self.path.with_name(self.path.stem + ".eval.csv")
        self.test_path = self.path.with_name(self.path.stem + ".test.csv")
        self.system_path = self.path.with_name(self.path.stem + ".system.csv")
        #: Options, locks and the background writer: :class:`hookbus.sink_api.WriterKit`.
        self.output: WriterKit[Item] = WriterKit(
            self.name,
            flush_secs=flush_secs,
            max_queue_size=max_queue_size,
            close_deadline=close_deadline,
            flush_deadline=flush_deadline,
        )
        flag("epochs", epochs)
        self.separator = check_separator(separator)
        flag("append", append)
        self.append = append
        flag("system", system)
        self.system = system
        self._put_lock = threading.Lock()  # the sampler's thread puts too: the writer's counters are for one
        self._sessions = 0  # train sessions since the training began: its first may start the file anew
        if not epochs and self.keys is not None and any(k.startswith(EPOCH_PREFIX) for k in self.keys):
            raise ValueError(f"keys {sorted(self.keys)} name epoch keys; pass epochs=True to write epoch rows")
        self.epochs = epochs
        if epochs:
            self.schedule = Schedule()  # never due on a step: epoch events are unscheduled
        self._files: dict[str, CSVFile] = {}

    @property
    def receives_epochs(self) -> bool:
        return self.epochs  # epochs=True: the Keras callback's epoch events, CSVLogger-like rows

    def set_output_suffix(self, suffix: str) -> None:
        """Write ``<stem>.<suffix><ext>`` (and its eval and test files) instead: per-worker output."""
        base = self._base_path
        self.path = base.with_name(f"{base.stem}.{suffix}{base.suffix}")
        self.eval_path = self.path.with_name(self.path.stem + ".eval.csv")
        self.test_path = self.path.with_name(self.path.stem + ".test.csv")
        self.system_path = self.path.with_name(self.path.stem + ".system.csv")

    def on_begin(self, event: Event) -> None:
        if event.mode == "train":
            self._sessions = 0  # a training begins (a fit): its first session may start the file anew
        if self.output.writing:
            self._lock_files(event)  # a second publisher (eval) began in the same run
            return
        self.output.prepare(self.path.parent)
        known = self.context.known_keys
        wanted = sorted(k for k in known if self.keys is None or k in self.keys)
        if self.epochs:
            columns = ["epoch"] + [k[len(EPOCH_PREFIX) :] for k in wanted if k.startswith(EPOCH_PREFIX)]
            logger_file = CSVFile(
                self.path, columns, csv_logger_order=True, report=self._report, separator=self.separator
            )
            self._files = {"epoch": logger_file}
        else:
            train = [k for k in wanted if not k.startswith((EVAL_PREFIX, EPOCH_PREFIX, TEST_PREFIX))]
            evals = [k[len(EVAL_PREFIX) :] for k in wanted if k.startswith(EVAL_PREFIX)]
            tests = [k[len(TEST_PREFIX) :] for k in wanted if k.startswith(TEST_PREFIX)]
            self._files = {
                "train": CSVFile(self.path, train, report=self._report, separator=self.separator),
                "eval": CSVFile(self.eval_path, evals, report=self._report, separator=self.separator),
                "test": CSVFile(self.test_path, tests, every_row=True, report=self._report, separator=self.separator),
            }
        if self.system:
            self._files["system"] = CSVFile(
                self.system_path, [], every_row=True, report=self._report, separator=self.separator
            )
        for f in self._files.values():
            f.read_header()  # a foreign file fails here, before training
        self._lock_files(event)
        self.output.start(
            self._write,
            self._flush_files,
            self._close_files,
            landed=lambda: sum(f.landed for f in self._files.values()),
            write_batch=self._write_batch,
            target=" and ".join(repr(str(f.path)) for f in self._files.values()),
        )

    def _lock_files(self, event: Event) -> None:
        """Take the lock of every file this publisher writes (one writer per file), before step 1.

        A train publisher writes the train (or epoch) file, and the eval file when eval keys are
        known; an eval publisher only the eval file, so an evaluator beside training may share ``path``;
        a test evaluation only the test file.
        """
        wanted = [name for name, f in self._files.items() if name != "eval" or f.columns or event.mode == "eval"]
        if event.mode in ("eval", "test"):
            wanted = [name for name in wanted if name == event.mode]
        else:  # a training publisher's run samples the machine
            wanted = [name for name in wanted if name != "test"]
        for name in wanted:
            self.output.lock(self._files[name].path, "the CSV file")

    def on_session_created(self, event: Event) -> None:
        if event.mode != "train" or not self.output.writing:
            return  # an eval session evaluates a checkpoint; it is no resume point
        anew = not self.append and self._sessions == 0
        self._sessions += 1
        for name, f in self._files.items():  # anew: keep no row (steps count from 0)
            if name not in ("test", "system"):  # test evaluations and samples: no resume drops them
                self.output.call(functools.partial(f.start_session, -1 if anew else event.step))

    def on_after_run(self, event: Event) -> None:
        output, mode = self.output, event.mode
        if not output.writing or (mode == "epoch") != self.epochs:
            return
        if self.epochs:
            row = {
                k[len(EPOCH_PREFIX) :]: float(v)
                for k, v in event.values.items()
                if k.startswith(EPOCH_PREFIX) and (self.keys is None or k in self.keys)
            }
            row = {"epoch": int(event.values["epoch"]), **row} if "epoch" in event.values else row
            with self._put_lock:
                output.put(("epoch", event.step, event.wall_time, row))
            return
        # The row is made on the writer's thread (_row), from the event's values: read-only, as
        # the publisher converted them. Here only whether there is one: a scalar this sink writes.
        keys, values = self.keys, event.values
        for key, value in values.items():
            if isinstance(value, float) and (keys is None or key in keys):
                with self._put_lock:
                    output.put((mode if mode in ("eval", "test") else "train", event.step, event.wall_time, values))
                return

    def on_system(self, event: Event) -> None:
        """A sample of the machine (on the sampler's thread): a row of ``<stem>.system.csv`` with
        ``system=True``; nothing before begin or after close."""
        if self.system and "system" in self._files:
            with self._put_lock:
                if self.output.writing:
                    self.output.put(("system", event.step, event.wall_time, event.values))

    def flush(self) -> None:
        """Block until every row received so far is handed to the OS (checkpoint barrier)."""
        self.output.flush()

    def close(self) -> None:
        """Write what is queued (within ``close_deadline``), close the files, release them; idempotent."""
        self.output.close()

    def writer_stats(self) -> WriterStats | None:
        """Rows queued and written by this run's writer (see :meth:`hookbus.EventBus.stats`)."""
        return self.output.stats()

    def _report(self, message: str) -> None:
        # From the writer's thread: logged like the bus's own reports of a sink's errors.
        logger.warning("%s: %s", self.name, message)

    def _row(self, item: Item) -> Row:
        """The row of ``item`` (writer thread): its scalar values this sink writes, as floats,
        eval and test keys without their prefix."""
        name, step, wall_time, values = item
        if name == "epoch":
            return step, wall_time, dict(values)  # made on the training thread (epochs are few)
        if name == "system":
            return (
                step,
                wall_time,
                {k: v for k, v in values.items() if isinstance(v, float) and k.startswith(SYSTEM_PREFIX)},
            )
        keys = self.keys
        prefix = EVAL_PREFIX if name == "eval" else TEST_PREFIX if name == "test" else None
        row: dict[str, float] = {}
        for k, v in values.items():  # a loop: on Python 3.11 a comprehension is one more call per row
            if isinstance(v, float) and (keys is None or k in keys):
                row[k[len(prefix) :] if prefix is not None and k.startswith(prefix) else k] = float(v)
        return step, wall_time, row

    def _write(self, item: Item) -> None:
        self._files[item[0]].write(self._row(item))

    def _write_batch(self, items: list[Item]) -> None:
        # One check and one write per file for the rows the writer found queued together.
        rows: dict[str, list[Row]] = {}
        make = self._row
        for item in items:
            name = item[0]
            if name in rows:
                rows[name].append(make(item))
            else:
                rows[name] = [make(item)]
        for name, file_rows in rows.items():
            self._files[name].write_rows(file_rows)

    def _flush_files(self) -> None:
        for f in self._files.values():
            f.flush()

    def _close_files(self) -> None:
        for f in self._files.values():
            f.close()
