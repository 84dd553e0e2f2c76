"""One CSV file of :class:`~hookbus.sinks.CSVSink`: header, rows, resume, and what reached the disk.

Touched only on the sink's writer thread. The file is appended to; it is rewritten (atomically)
only to widen the header or to drop rows after a resume point.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from pathlib import Path

from hookbus._writer import write_atomically

__all__ = ["FIXED", "CSVFile", "Row"]

FIXED = ("step", "wall_time")
Row = tuple[int, float, dict[str, float]]


def _cell(value: float) -> str:
    # repr round-trips floats and spells non-finite values nan/inf/-inf, which pandas and float() read.
    return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))


def _line(cells: Iterable[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


class CSVFile:
    """One CSV file, touched only on the writer's thread (after ``CSVSink.on_begin``)."""

    def __init__(self, path: Path, columns: list[str], *, csv_logger_order: bool = False) -> None:
        self.path = path
        # CSVLogger's order (epoch, then the rest sorted) for epoch files, kept while no row is
        # written yet: metrics the callback's keys did not name arrive with the first epoch.
        self.csv_logger_order = csv_logger_order
        self.columns = self._ordered(columns)  # the value columns, after step and wall_time
        self.last_step = -1
        self.resume_at: int | None = None
        self.handle: io.TextIOWrapper | None = None

    def read_header(self) -> list[str] | None:
        """The columns of an existing file (None if absent or empty); fails on a foreign file."""
        try:
            with self.path.open(newline="", encoding="utf-8") as f:
                first = f.readline()
        except FileNotFoundError:
            return None
        if not first.endswith("\n"):
            return None  # empty, or a header torn by a kill: rewritten whole at the resume point
        header = next(csv.reader([first]))
        if tuple(header[:2]) != FIXED:
            raise ValueError(
                f"{self.path} exists and is not a CSVSink file (its header starts {header[:2]}); "
                "choose another path or remove it"
            )
        return header[2:]

    def resume(self, step: int) -> io.TextIOWrapper:
        """Keep complete rows with step <= ``step``, widen the header, rewrite atomically if changed."""
        self.close()
        old = self.read_header()
        text = self.path.read_text(encoding="utf-8") if old is not None else ""
        lines = text.splitlines(keepends=True)[1:]
        # A last line without its newline was torn by a kill; its step is regenerated after S.
        kept = [ln for ln in lines if ln.endswith("\n") and int(ln.split(",", 1)[0]) <= step]
        self.columns = (old or []) + [c for c in self.columns if c not in (old or [])]
        if not kept:  # no row to keep in step with the old header: the order is free
            self.columns = self._ordered(self.columns)
        self.last_step = int(kept[-1].split(",", 1)[0]) if kept else -1
        if old != self.columns or len(kept) != len(lines):
            extra = "," * (len(self.columns) - len(old or []))  # old rows: new cells empty
            self.replace(_line([*FIXED, *self.columns]) + "".join(ln[:-1] + extra + "\n" for ln in kept))
        self.handle = self.path.open("a", newline="", encoding="utf-8")
        return self.handle

    def _ordered(self, columns: list[str]) -> list[str]:
        if not self.csv_logger_order:
            return columns
        return [c for c in columns if c == "epoch"] + sorted(c for c in columns if c != "epoch")

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
        step, wall_time, values = row
        handle = self.handle
        if handle is None:  # no session announced, or a file deferred by start_session
            handle = self.resume(step - 1 if self.resume_at is None else self.resume_at)
        if step <= self.last_step:
            return  # one row per step: a repeat of a step already in the file is dropped
        new = [k for k in values if k not in self.columns]
        if new:
            self.columns += new
            handle = self.resume(self.last_step)
        self.last_step = step
        cells = [str(step), repr(wall_time)] + [_cell(values[c]) if c in values else "" for c in self.columns]
        handle.write(_line(cells))

    def flush(self) -> None:
        if self.handle is not None:
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
