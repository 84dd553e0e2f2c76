"""One CSV file of :class:`~hookbus.sinks.CSVSink`: header, rows, resume, and what reached the disk.

Touched only on the sink's writer thread. The file is appended to; it is rewritten (atomically)
only to widen the header or to drop rows after a resume point.

Two things it keeps track of beyond the rows:

- **The file at the path is still the one it writes.** Before each batch of rows (those the
  writer thread found queued together) it compares the path's ``(st_dev, st_ino)`` with the open
  file's, and writes the batch in one call. A file deleted (or moved away) mid-run is started
  anew with the header; a file replaced by another CSVSink file (an editor's save, a restored
  copy) is resumed like at a session start: its rows up to the last step written are kept.
  Either way the rows not yet handed to the OS are written again into the file now at the path,
  and the change is reported. Rows already handed to the OS went with the old file.
- **What reached the disk.** Each row's end offset is remembered until a flush; then the file's
  real size says which of those rows are complete in it. A flush that reports success is not
  trusted alone: after a failed write (a full disk, a file-size limit) Python's buffered writer
  may drop what it held, and a later flush "succeeds" with those rows missing (measured under
  ``RLIMIT_FSIZE``). So :attr:`landed` is exact: the rows that reached the file, plus those
  dropped on purpose (a repeated step).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import sys
from collections.abc import Callable, Iterable
from operator import itemgetter
from pathlib import Path

from hookbus.sink_api import write_atomically

__all__ = ["FIXED", "CSVFile", "Row", "check_separator"]

FIXED = ("step", "wall_time")
Row = tuple[int, float, dict[str, float]]


# A value's cell: repr round-trips floats and spells non-finite values nan, inf and -inf, which
# pandas and float() read. Value rows hold only such cells (and empty or ``NA`` ones), which CSV
# never quotes: they are joined with commas, what csv.writer writes for them.
_cell = repr


def csv_logger_columns(first: Iterable[str]) -> list[str]:
    """The columns ``keras.callbacks.CSVLogger`` writes, from its first epoch's log names.

    ``epoch``, then the names sorted; when none of them is a validation value (``val_*``: no
    validation in the first epoch, or none at all), ``val_<name>`` of each follows, in the same
    order (its cells ``NA`` until validation values come).
    """
    names = sorted(k for k in first if k != "epoch")
    if names and not any(k.startswith("val_") for k in names):
        names += [f"val_{k}" for k in names]
    return ["epoch", *names]


def _line(cells: Iterable[str], separator: str = ",") -> str:
    out = io.StringIO()
    csv.writer(out, delimiter=separator, lineterminator="\n").writerow(cells)
    return out.getvalue()


#: What may appear in a value row's cells (a step, repr of a float, nan, inf, NA) or ends a line:
#: never a separator, which would split a cell.
_IN_CELLS = frozenset('0123456789.+-eEnaifNA"\r\n')


def check_separator(separator: object) -> str:
    """``separator`` if it is one character no cell holds (``,`` ``;`` a tab ...)."""
    if not isinstance(separator, str) or len(separator) != 1 or not separator.isascii() or separator in _IN_CELLS:
        raise ValueError(
            f"separator must be one ASCII character that no cell holds, such as ',', ';' or a tab (got {separator!r})"
        )
    return separator


class CSVFile:
    """One CSV file, touched only on the writer's thread (after ``CSVSink.on_begin``)."""

    def __init__(
        self,
        path: Path,
        columns: list[str],
        *,
        csv_logger_order: bool = False,
        every_row: bool = False,
        report: Callable[[str], None] = lambda message: None,
        separator: str = ",",
    ) -> None:
        self.path = path
        #: A test evaluation's file: every row is kept (two of one step too), none is ever dropped.
        self.every_row = every_row
        self.separator = separator  # between cells, as CSVLogger's separator=
        self.report = report  # says that the file at the path changed under the sink
        # CSVLogger's columns and order for epoch files (csv_logger_columns), fixed by the first
        # row: metrics the callback's keys did not name arrive with the first epoch.
        self.csv_logger_order = csv_logger_order
        #: What an empty cell holds: CSVLogger writes ``NA`` for a value an epoch did not log.
        self.missing = "NA" if csv_logger_order else ""
        self._first: list[str] | None = None  # the first row's names, once written (epoch files)
        self.columns = self._ordered(columns)  # the value columns, after step and wall_time
        self._layout()
        self.last_step = -1
        self.resume_at: int | None = None
        self.handle: io.TextIOWrapper | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the open file
        #: Rows that reached the file (or were dropped on purpose), up to the last flush.
        self.landed = 0
        self._unflushed: list[tuple[int, Row]] = []  # (end offset in the file, row) since the last flush
        self._lines: list[str] = []  # rows of the batch being written, not given to the handle yet
        self._size = 0  # the file's size once everything written so far reaches it
        self._stale: set[str] = set()  # columns of kept rows this run does not write, once reported

    def read_header(self) -> list[str] | None:
        """The columns of an existing file (None if absent or empty); fails on a foreign file."""
        try:
            with self.path.open(newline="", encoding="utf-8") as f:
                first = f.readline()
        except FileNotFoundError:
            return None
        if not first.endswith("\n"):
            return None  # empty, or a header torn by a kill: rewritten whole at the resume point
        header = next(csv.reader([first], delimiter=self.separator))
        if tuple(header[:2]) != FIXED:
            raise ValueError(
                f"{self.path} exists and is not a CSVSink file (its header starts {header[:2]}); "
                "choose another path or remove it"
            )
        return header[2:]

    def resume(self, step: int) -> io.TextIOWrapper:
        """Keep complete rows with step <= ``step``, widen the header, rewrite atomically if changed."""
        self._spill()
        self.close()
        old = self.read_header()
        text = self.path.read_text(encoding="utf-8") if old is not None else ""
        lines = text.splitlines(keepends=True)[1:]
        # A last line without its newline was torn by a kill; its step is regenerated after S.
        sep = self.separator
        kept = [ln for ln in lines if ln.endswith("\n") and int(ln.split(sep, 1)[0]) <= step]
        if kept:  # the kept rows are in the old header's columns: they stay, new ones follow
            stale = [c for c in old or [] if c not in self.columns and c not in self._stale]
            self.columns = (old or []) + [c for c in self.columns if c not in (old or [])]
            if stale:
                self._stale.update(stale)
                self.report(
                    f"{str(self.path)!r} keeps its rows up to step {kept[-1].split(sep, 1)[0]}, which have the "
                    f"columns {stale} that this run does not write: those columns stay, empty in this run's rows"
                )
        else:  # no row to keep: the header is this run's columns alone, in the order they take
            self.columns = self._ordered(self.columns)
        self.last_step = int(kept[-1].split(sep, 1)[0]) if kept else -1
        self._layout()
        if old != self.columns or len(kept) != len(lines):
            extra = (sep + self.missing) * (len(self.columns) - len(old or []))  # old rows: new cells empty
            self.replace(_line([*FIXED, *self.columns], sep) + "".join(ln[:-1] + extra + "\n" for ln in kept))
        self.handle = self.path.open("a", newline="", encoding="utf-8")
        opened = os.fstat(self.handle.fileno())
        self._identity, self._size = (opened.st_dev, opened.st_ino), opened.st_size
        return self.handle

    def _layout(self) -> None:
        """Fix the usual row's format for the columns now: a row with a value in each column and
        no other is one ``%`` of a template (``str`` of the step, ``repr`` of every other cell, as
        the general path writes them), its values taken in column order by one call."""
        columns = self.columns
        self._known = frozenset(columns)
        sep = self.separator.replace("%", "%%")
        self._template = f"%s{sep}%r" + f"{sep}%r" * len(columns) + "\n"
        take: Callable[[dict[str, float]], tuple[float, ...]] | None = None
        if len(columns) == 1:
            one = columns[0]
            take = lambda values: (values[one],)  # noqa: E731 - itemgetter of one key returns no tuple
        elif columns:
            take = itemgetter(*columns)
        self._take = take

    def _ordered(self, columns: list[str]) -> list[str]:
        if not self.csv_logger_order:
            return columns
        if self._first is None:  # no row yet: a provisional order
            return [c for c in columns if c == "epoch"] + sorted(c for c in columns if c != "epoch")
        logger = csv_logger_columns(self._first)
        return logger + sorted(c for c in columns if c not in logger)

    def start_session(self, step: int) -> None:
        """A session starts at ``step``: resume now, or at the first row if there is no file yet."""
        self.resume_at = step
        if self.columns or self.path.exists():
            self.resume(step)
        else:
            self.close()  # no columns and no file (no eval publisher yet): no empty file

    def replace(self, text: str) -> None:
        write_atomically(self.path, text)

    def write(self, row: Row) -> None:
        self.write_rows((row,))

    def write_rows(self, rows: Iterable[Row]) -> None:
        """Write rows queued together: one check that the path still names the open file, one write."""
        if self.handle is not None and self._moved():
            self._restart()
        batch = list(rows)
        at = self._write_usual(batch, 0)
        while at < len(batch):
            self._write(batch[at])  # what the usual path does not take: a resume, a repeat, new keys
            at = self._write_usual(batch, at + 1)
        self._spill()

    def _write_usual(self, rows: list[Row], start: int) -> int:
        """Write the usual rows of ``rows`` from ``start`` on (a new step, a value in every column
        and no other, the file open): one ``%`` of the template each, in one loop without a call
        per row. Returns the index of the first row that is not one (``len(rows)``: none)."""
        take, handle = self._take, self.handle
        if take is None or handle is None or (self.csv_logger_order and self._first is None and self.last_step < 0):
            return start  # no columns, no open file, or an epoch file's first row (it fixes the columns)
        template, known, width = self._template, self._known, len(self.columns)
        lines, unflushed = self._lines, self._unflushed
        last, size, at = self.last_step, self._size, start
        for row in rows[start:]:
            step, wall_time, values = row
            if step <= last or len(values) != width or not known.issuperset(values):
                break
            line = template % (step, wall_time, *take(values))
            size += len(line)  # ASCII: digits, signs, '.', 'e', nan, inf
            unflushed.append((size, row))
            lines.append(line)
            last, at = step, at + 1
        self.last_step, self._size = last, size
        return at

    def _spill(self) -> None:
        """Give the handle the lines formatted since the last spill."""
        if self._lines and self.handle is not None:
            text = "".join(self._lines)
            self._lines = []
            self.handle.write(text)

    def _write(self, row: Row) -> None:
        step, wall_time, values = row
        handle = self.handle
        if handle is None:  # no session announced, or a file deferred by start_session
            handle = self.resume(self._kept_to(step - 1 if self.resume_at is None else self.resume_at))
        if step <= self.last_step and not self.every_row:
            self.landed += 1  # dropped on purpose, not lost
            return  # one row per step: a repeat of a step already in the file is dropped
        new = [k for k in values if k not in self._known]
        first = self.csv_logger_order and self._first is None and self.last_step < 0
        if first:  # the first row of a new epoch file fixes its columns, as CSVLogger's first epoch does
            self._first = list(values)
        if new or first:
            self.columns += new
            handle = self.resume(self._kept_to(self.last_step))
        missing = self.missing
        cells = [_cell(values[c]) if c in values else missing for c in self.columns]
        line = self.separator.join([str(step), repr(wall_time), *cells]) + "\n"
        self.last_step = step
        self._size += len(line)  # ASCII: digits, signs, '.', 'e', nan, inf, NA
        self._unflushed.append((self._size, row))
        self._lines.append(line)

    def _kept_to(self, step: int) -> int:
        """The last step whose rows a rewrite keeps: ``step``, or all rows in an ``every_row`` file."""
        return sys.maxsize if self.every_row else step

    def _moved(self) -> bool:
        """Whether the path no longer names the open file (deleted, moved away or replaced)."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return True
        return (now.st_dev, now.st_ino) != self._identity

    def _restart(self) -> None:
        """The file at the path changed under us: go on in the one there now (or a new one)."""
        replay = [row for _, row in self._unflushed]
        self._unflushed, self._lines = [], []  # the lines not given to the old file are replayed too
        handle, self.handle = self.handle, None
        if handle is not None:
            with contextlib.suppress(OSError):  # its unflushed rows go with the old file: replayed below
                handle.close()
        if self.path.exists():
            self.report(
                f"{str(self.path)!r} was replaced by another file while the run wrote it; writing goes on in "
                f"that file, keeping its rows up to step {self.last_step} and adding the rows not yet written"
            )
        else:
            self.report(
                f"{str(self.path)!r} was deleted (or moved) while the run wrote it; a new file with the header "
                "takes its place: the rows written before are not in it, every later row is"
            )
        self.resume(self._kept_to(self.last_step))  # a foreign file there now fails (it is not ours to overwrite)
        for row in replay:
            self._write(row)

    def _settle(self, handle: io.TextIOWrapper) -> None:
        """Count the rows written since the last flush that are complete in the file now.

        Rows are appended in order, so a row made it if its last byte is within the file's size;
        the others are lost (they are never written again).
        """
        size = os.fstat(handle.fileno()).st_size
        self.landed += sum(1 for end, _ in self._unflushed if end <= size)
        self._unflushed = []

    def flush(self) -> None:
        if self.handle is not None:
            self._spill()
            self.handle.flush()
            self._settle(self.handle)

    def close(self) -> None:
        handle, self.handle = self.handle, None
        if handle is None:
            return
        try:
            if self._lines:
                text, self._lines = "".join(self._lines), []
                handle.write(text)
            handle.flush()
        except BaseException:
            self._settle(handle)
            with contextlib.suppress(OSError):  # the same error again: the first is the one reported
                handle.close()
            raise
        self._settle(handle)
        handle.close()
