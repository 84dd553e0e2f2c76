"""The lifecycle every writer sink shares, as one part a sink owns: :class:`WriterKit`.

A sink that writes files (CSV, TensorBoard's event files, the event log, a user's JSON lines,
a tracker's client) keeps only what is its own — the format, the columns, the resume rules — and
hands the rest to its kit:

- the output path's checks when the sink is made (:meth:`WriterKit.file_path`,
  :meth:`WriterKit.directory_path`), and its directory's at begin (:meth:`WriterKit.prepare`);
- the writer options, checked when the sink is made: ``flush_secs``, ``max_queue_size``,
  ``close_deadline``, ``flush_deadline``;
- one lock per output (one writer per file), from begin to close (:meth:`WriterKit.lock`);
- the run's writer: a :class:`hookbus.sink_api.BackgroundWriter` the kit starts (:meth:`WriterKit.start`),
  or a writer with a thread of its own, such as TensorBoard's ``EventFileWriter``, adopted as a
  :class:`hookbus.sink_api.OwnThreadWriter` (:meth:`WriterKit.adopt`) — never a second queue on it;
- :meth:`WriterKit.flush` within the flush deadline (a stall raises :class:`hookbus.sink_api.WriterStalled`
  naming the sink, its output and what it could not write; the bus disables the sink);
- :meth:`WriterKit.stats` that outlive close, and an idempotent :meth:`WriterKit.close` within
  the close deadline that releases the locks.

A sink writing JSON lines on the kit alone::

    class JSONLinesSink(hookbus.sink_api.Sink):
        def __init__(self, path, **kwargs):
            super().__init__(every_n_steps=1)
            self.path = hookbus.sink_api.WriterKit.file_path("path", path)
            self.output = hookbus.sink_api.WriterKit[str](self.name, **kwargs)

        def on_begin(self, event):
            if not self.output.writing:
                self.output.prepare(self.path.parent)
                self.output.lock(self.path, "the JSON-lines file")
                file = open(self.path, "a")
                self.output.start(file.write, file.flush, file.close, target=repr(str(self.path)))

        def on_after_run(self, event):
            self.output.put(json.dumps({"step": event.step, **event.values}) + "\\n")

        def flush(self):
            self.output.flush()

        def writer_stats(self):
            return self.output.stats()

        def close(self):
            self.output.close()
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from hookbus._contract._stats import WriterStats
from hookbus._rules._files import check_writable_dir, make_writable_dir
from hookbus._rules._validate import non_empty_path, positive_int, seconds
from hookbus._writers._deadline import DEFAULT_FLUSH_DEADLINE, FlushDeadline
from hookbus._writers._lock import OutputLock, lock_path
from hookbus._writers._own_thread import OwnThreadWriter
from hookbus._writers._writer import BackgroundWriter

__all__ = ["WriterKit"]

T = TypeVar("T")


class _Writer(Protocol):
    """What the kit needs of a run's writer (:class:`BackgroundWriter`, :class:`OwnThreadWriter`)."""

    deadline: FlushDeadline

    def flush(self) -> None: ...
    def close(self, deadline: float = ...) -> object: ...
    def stats(self) -> WriterStats: ...


class WriterKit(Generic[T]):
    """The writer-sink lifecycle: options, locks, the run's writer, flush, stats and close.

    Made in the sink's ``__init__`` (so that a wrong option fails before training starts); the
    writer is started at ``begin``, one per run (``with bus:``), and closed with the sink.

    Args:
        name: The sink's name, first in every message and report.
        flush_secs: Longest time written items stay unflushed (default 5.0).
        max_queue_size: Items that may wait before training blocks (default 1024).
        close_deadline: Seconds :meth:`close` waits for the writer (default 10.0).
        flush_deadline: Seconds a flush (the checkpoint barrier, a session's end) may wait for the
            disk (default 30.0); past it the writer is reported with its output and what it could
            not write, and given up, and training and the checkpoint go on.

    Raises:
        ValueError: An option is not a positive int (``max_queue_size``) or a positive finite
            number of seconds (the others), e.g. ``flush_secs must be a positive finite number of
            seconds (got 0)``.
    """

    def __init__(
        self,
        name: str,
        *,
        flush_secs: float = 5.0,
        max_queue_size: int = 1024,
        close_deadline: float = 10.0,
        flush_deadline: float = DEFAULT_FLUSH_DEADLINE,
    ) -> None:
        self.name = name
        self.flush_secs = seconds("flush_secs", flush_secs)
        self.max_queue_size = positive_int("max_queue_size", max_queue_size)
        self.close_deadline = seconds("close_deadline", close_deadline)
        self.flush_deadline = seconds("flush_deadline", flush_deadline)
        self._locks: dict[str, OutputLock] = {}  # by lock file
        self._writer: _Writer | None = None  # this run's, until close
        self._last: _Writer | None = None  # the closed run's: its stats stay readable (bus.stats())

    # -- paths ------------------------------------------------------------------------------
    @staticmethod
    def file_path(argument: str, path: str | os.PathLike[str]) -> Path:
        """Check an output file's path when the sink is made, and return it as a ``Path``.

        Args:
            argument: The argument's name, for messages (e.g. ``"path"``).
            path: The file; its directory may not exist yet (it is made at begin).

        Raises:
            ValueError: ``path`` is empty, a directory, or under a file.
            PermissionError: Its directory (or nearest existing ancestor) is not writable.
        """
        file = Path(non_empty_path(argument, path))
        if file.is_dir():
            raise ValueError(f"{argument} must be a file, not a directory (got {str(file)!r})")
        check_writable_dir(str(file.parent), f"{argument}'s directory")
        return file

    @staticmethod
    def directory_path(argument: str, path: str | os.PathLike[str]) -> str:
        """Check an output directory's path when the sink is made (as :meth:`file_path`), and return it."""
        directory = non_empty_path(argument, path)
        if os.path.isfile(directory):
            raise ValueError(f"{argument} must be a directory, but {directory!r} is an existing file")
        check_writable_dir(directory, argument)
        return directory

    def prepare(self, directory: str | os.PathLike[str], what: str = "") -> None:
        """At begin: create ``directory`` and check a file can be made in it.

        Args:
            directory: Where the outputs go.
            what: What the sink writes there, for the message (e.g. ``"event files"``; default none).

        Raises:
            OSError: Naming the sink and the directory (``CSVSink cannot write in '/x': ...``), now
                rather than on the writer's thread at the first row.
        """
        try:
            make_writable_dir(directory)
        except OSError as error:
            raise OSError(
                f"{self.name} cannot write{' ' + what if what else ''} in {os.fspath(directory)!r}: {error}"
            ) from error

    def lock(self, output: str | os.PathLike[str], what: str, *, path: str | None = None) -> None:
        """Take the lock of one output until :meth:`close` (idempotent): one writer per file.

        Args:
            output: The file (or directory) written, named in the message.
            what: What it is, for the message (e.g. ``"the CSV file"``).
            path: The lock file (default ``.<name>.lock`` beside ``output``).

        Raises:
            OutputInUseError: Another run (or another sink) holds it; the message names the holder.
        """
        key = os.path.abspath(path) if path is not None else lock_path(output)
        lock = self._locks.get(key)
        if lock is None:
            lock = OutputLock(output, self.name, what, path)
        lock.acquire()
        self._locks[key] = lock

    # -- the run's writer -------------------------------------------------------------------
    def start(
        self,
        write: Callable[[T], object],
        flush: Callable[[], None],
        close: Callable[[], None] | None = None,
        *,
        landed: Callable[[], int] | None = None,
        write_batch: Callable[[list[T]], object] | None = None,
        target: str,
    ) -> None:
        """Start this run's writer: a :class:`hookbus.sink_api.BackgroundWriter` with the kit's options.

        ``write``, ``flush`` and ``close`` run on its thread only (see ``BackgroundWriter`` for
        them, ``landed`` and ``write_batch``); ``target`` names the output in reports (e.g. ``"'/logs/m.csv'"``).
        """
        self._open(
            BackgroundWriter(
                self.name,
                write,
                flush,
                close,
                landed=landed,
                write_batch=write_batch,
                max_queue_size=self.max_queue_size,
                flush_secs=self.flush_secs,
                flush_deadline=self.flush_deadline,
                target=target,
            )
        )

    def adopt(self, flush: Callable[[], None], close: Callable[[], None], *, target: str, unit: str = "events") -> None:
        """Start this run with a writer that has a thread of its own, as a :class:`hookbus.sink_api.OwnThreadWriter`.

        Its queue must hold ``max_queue_size`` items (make it with the kit's options); items go
        through :meth:`add`, blocking calls through :meth:`run`.
        """
        self._open(
            OwnThreadWriter(
                self.name,
                flush,
                close,
                capacity=self.max_queue_size,
                flush_deadline=self.flush_deadline,
                target=target,
                unit=unit,
            )
        )

    def _open(self, writer: _Writer) -> None:
        if self._writer is not None:
            raise RuntimeError(f"{self.name}: a writer is open already (close() ends the run's)")
        self._writer = writer

    @property
    def writing(self) -> bool:
        """Whether this run's writer is started and not closed."""
        return self._writer is not None

    @property
    def stalled(self) -> bool:
        """Whether this run's (or the closed run's) writer missed its flush deadline."""
        writer = self._writer or self._last
        return writer is not None and writer.deadline.stalled

    def put(self, item: T) -> None:
        """Give the background writer ``item``; blocks while its queue is full.

        Raises:
            WriterError: The writer failed, stalled or is closed.
        """
        writer = self._writer  # once per row: the test of _background() without its call
        (writer if isinstance(writer, BackgroundWriter) else self._background()).put(item)

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the background writer's thread, after every item given before it."""
        self._background().call(fn)

    def add(self, put: Callable[[], None], *, row: bool = True) -> None:
        """Hand an adopted writer one item (see :meth:`hookbus.sink_api.OwnThreadWriter.add`)."""
        self._own().add(put, row=row)

    def run(self, call: Callable[[], None], unwritten: str) -> None:
        """Run an adopted writer's blocking ``call`` within the flush deadline (see :meth:`adopt`)."""
        self._own().run(call, unwritten)

    def _background(self) -> BackgroundWriter[T]:
        writer = self._writer
        if not isinstance(writer, BackgroundWriter):
            raise RuntimeError(f"{self.name}: no background writer is started (start() at begin)")
        return writer

    def _own(self) -> OwnThreadWriter:
        writer = self._writer
        if not isinstance(writer, OwnThreadWriter):
            raise RuntimeError(f"{self.name}: no writer is adopted (adopt() at begin)")
        return writer

    # -- the bus's side ---------------------------------------------------------------------
    def flush(self) -> None:
        """Block until everything given so far is handed to the OS (the checkpoint barrier).

        Raises:
            WriterStalled: Not within ``flush_deadline``; the writer is given up.
            WriterError: The writer failed.
        """
        if self._writer is not None:
            self._writer.flush()

    def stats(self) -> WriterStats | None:
        """This run's writer's counts, or the last closed one's (``None`` before the first begin)."""
        writer = self._writer or self._last
        return None if writer is None else writer.stats()

    def close(self) -> None:
        """Drain and close the writer within ``close_deadline``, then release the locks; idempotent.

        Warns (:class:`hookbus.sink_api.WriterWarning`) with what could not be written in time; after a stall
        it does not wait again. The locks are released even when the writer's close raises.
        """
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                self._last = writer
                writer.close(self.close_deadline)
        finally:
            locks, self._locks = self._locks, {}
            for lock in locks.values():  # the next run, in this process or another, may write here
                lock.release()
