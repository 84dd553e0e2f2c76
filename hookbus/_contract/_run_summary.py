"""A run's summary beside its event log: a table of runs reads it instead of the log.

``EventLogSink`` folds every record it writes into a :class:`RunSummary` and, at each flush of the
log (every ``flush_secs``, the checkpoint barrier, the end of a session, the close), replaces
``<stem>.summary.json`` beside the log with it, atomically, together with the log's length and
inode it covers. A reader (:func:`read_run_summary`) takes the summary and folds only the records
written after it (at most a flush interval's); a summary that is missing, unreadable, of a newer
format, or of another file (a cut replaced the log: a new inode, or a shorter log) is rebuilt by
reading the log, as a log written before summaries existed is.

What it holds is what a row of runs shows: the hyper-parameters, the task, the total steps when
known, the first and last wall time, the newest step, the training rate (train steps over the
wall time between the first and the newest train record), how the run ended in one word
(:mod:`hookbus._contract._ending`; ``None`` while it has not), its first stop and its last error,
and for each scalar key as the log records it (``loss``, ``eval/loss``, ``test/accuracy``, ...)
the latest value and the best with their steps (best by :func:`~hookbus._rules._direction.better_direction`;
non-finite values are latest but never best, and counted), and the newest sample of the machine
(a ``system`` record's values and its host).

The log is the truth: the summary is folded from the same records, in the same order, and a cut
(a resume) rewrites both.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hookbus._contract._ending import how_ended
from hookbus._contract._event_log import STEP_FIELDS
from hookbus._contract._events import StopRequest
from hookbus._contract._system import SYSTEM_PREFIX
from hookbus._rules._direction import better_direction

__all__ = ["SUMMARY_VERSION", "KeySummary", "RunSummary", "read_run_summary", "run_summary_path"]

#: The summary's format version; a reader rebuilds from the log when a summary says a newer one.
SUMMARY_VERSION = 1
_TAIL = 48  # bytes of the log's covered end kept in the summary, to tell the file it covers


def run_summary_path(log: str | os.PathLike[str]) -> Path:
    """Where the summary of the event log ``log`` is: ``<stem>.summary.json`` beside it."""
    path = Path(log)
    return path.with_name(f"{path.stem}.summary.json")


class KeySummary:
    """One key's latest value and its best, each with its step.

    Attributes:
        direction: ``"min"``, ``"max"`` or ``None`` (nothing tells: no best is kept).
        latest, latest_step: The newest value recorded and its step.
        best, best_step: The best finite value and its step (the first step it was reached).
        nonfinite: How many NaN or infinite values were recorded.
    """

    __slots__ = ("best", "best_step", "direction", "latest", "latest_step", "nonfinite")

    def __init__(self, direction: str | None) -> None:
        self.direction = direction
        self.latest: float | None = None
        self.latest_step: int | None = None
        self.best: float | None = None
        self.best_step: int | None = None
        self.nonfinite = 0

    def add(self, step: int, value: float) -> None:
        self.latest, self.latest_step = value, step
        if not math.isfinite(value):
            self.nonfinite += 1
            return
        best, direction = self.best, self.direction
        if direction is None:
            return
        if best is None or (value < best if direction == "min" else value > best):
            self.best, self.best_step = value, step

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KeySummary:
        key = cls(data.get("direction"))
        for name in cls.__slots__:
            setattr(key, name, data.get(name, getattr(key, name)))
        return key


class RunSummary:
    """The fold of a run's event-log records into what a row of runs shows (see the module)."""

    def __init__(self) -> None:
        self.records = 0
        self.hparams: dict[str, Any] | None = None
        self.task: str | None = None
        self.total_steps: int | None = None
        self.flush_secs: float | None = None  # the writer's flush interval (how often the log grows)
        self.first_wall_time: float | None = None
        self.last_wall_time: float | None = None
        self.step: int | None = None
        self.train_first: tuple[int, float] | None = None  # (step, wall time) of the first train record
        self.train_last: tuple[int, float] | None = None
        self.ended: str | None = None
        self.stop: dict[str, Any] | None = None  # the first stop request: step, reason, source
        self.error: str | None = None
        self.keys: dict[str, KeySummary] = {}
        self.machine: dict[str, float] | None = None  # the newest sample's values (system/... keys)
        self.host: str | None = None  # the host it was taken on
        self._said_ended = False  # the close record said how it ended (else: read from the records)

    @property
    def rate(self) -> float | None:
        """Train steps per second of wall time between the first and the newest train record."""
        first, last = self.train_first, self.train_last
        if first is None or last is None or last[1] <= first[1]:
            return None
        return (last[0] - first[0]) / (last[1] - first[1])

    def add(self, record: Mapping[str, Any]) -> None:
        """Fold one decoded record (as :func:`hookbus.read_event_log` gives it)."""
        self.records += 1
        kind = record.get("record")
        wall_time = record.get("wall_time")
        if isinstance(wall_time, (int, float)):
            if self.first_wall_time is None:
                self.first_wall_time = float(wall_time)
            self.last_wall_time = float(wall_time)
        step = record.get("step")
        if kind == "begin":
            if record.get("hparams") is not None:
                self.hparams = dict(record["hparams"])
            self.task = record.get("task", self.task)
            if record.get("total_steps") is not None:
                self.total_steps = record["total_steps"]
            if isinstance(record.get("flush_secs"), (int, float)):
                self.flush_secs = float(record["flush_secs"])
            if self.ended is not None:  # a run appended after one that closed: live again
                self.ended, self.stop, self.error, self._said_ended = None, None, None, False
        elif kind == "step" and isinstance(step, int):
            self._step_values(record, step)
        elif kind == "system":
            nested = record.get("values")
            values = nested.items() if isinstance(nested, Mapping) else record.items()
            self.machine = {k: float(v) for k, v in values if k.startswith(SYSTEM_PREFIX) and type(v) is float}
            self.host = None if record.get("host") is None else str(record.get("host"))
        elif kind == "stop_requested" and self.stop is None:
            self.stop = {"step": step, "reason": record.get("reason"), "source": record.get("source")}
        elif kind == "exception":
            self.error = record.get("error")
        elif kind == "close":
            ended = record.get("ended")
            self._said_ended = isinstance(ended, str)
            self.ended = ended if isinstance(ended, str) else self._ended_from_records()
        if isinstance(step, int) and kind != "close" and (self.step is None or step > self.step):
            self.step = step

    def _step_values(self, record: Mapping[str, Any], step: int) -> None:
        if record.get("mode") == "train" and isinstance(record.get("wall_time"), (int, float)):
            mark = (step, float(record["wall_time"]))
            if self.train_first is None:
                self.train_first = mark
            self.train_last = mark
        nested = record.get("values")
        values: Iterable[tuple[str, Any]] = record.items()
        if isinstance(nested, Mapping):
            values = [*values, *nested.items()]
        keys = self.keys
        for name, value in values:
            if name in STEP_FIELDS or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            key = keys.get(name)
            if key is None:
                key = keys[name] = KeySummary(better_direction(name))
            key.add(step, float(value))

    def _ended_from_records(self) -> str:
        """How a run whose close record does not say it ended (a log written before ``ended``)."""
        stop = None
        if self.stop is not None:
            stop = StopRequest(
                str(self.stop.get("reason")), str(self.stop.get("source")), int(self.stop.get("step") or 0), 0.0
            )
        error: BaseException | None = None
        if self.error is not None:
            error = KeyboardInterrupt() if self.error.startswith("KeyboardInterrupt") else RuntimeError(self.error)
        return how_ended(stop, error)

    # -- on disk ------------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "hparams": self.hparams,
            "task": self.task,
            "total_steps": self.total_steps,
            "flush_secs": self.flush_secs,
            "first_wall_time": self.first_wall_time,
            "last_wall_time": self.last_wall_time,
            "step": self.step,
            "train_first": self.train_first,
            "train_last": self.train_last,
            "rate": self.rate,
            "ended": self.ended,
            "said_ended": self._said_ended,
            "stop": self.stop,
            "error": self.error,
            "keys": {name: key.as_dict() for name, key in self.keys.items()},
            "machine": self.machine,
            "host": self.host,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSummary:
        summary = cls()
        for name in (
            "records",
            "hparams",
            "task",
            "total_steps",
            "flush_secs",
            "first_wall_time",
            "last_wall_time",
            "step",
            "ended",
            "stop",
            "error",
            "machine",
            "host",
        ):
            setattr(summary, name, data.get(name, getattr(summary, name)))
        for name in ("train_first", "train_last"):
            mark = data.get(name)
            setattr(summary, name, None if mark is None else (int(mark[0]), float(mark[1])))
        summary._said_ended = bool(data.get("said_ended"))
        summary.keys = {name: KeySummary.from_dict(key) for name, key in (data.get("keys") or {}).items()}
        return summary

    def to_json(self, size: int, inode: int | None, tail: bytes) -> str:
        """The summary file's text: this fold, covering the log's first ``size`` bytes of file ``inode``,
        which end with ``tail`` (the end of the last line covered: a file that reuses the inode
        number of a log a cut replaced does not end so)."""
        body = {
            "v": SUMMARY_VERSION,
            "log_size": size,
            "log_inode": inode,
            "log_tail": tail[-_TAIL:].decode("utf-8", "replace"),
            **self.as_dict(),
        }
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=True) + "\n"

    @classmethod
    def of_lines(cls, data: bytes) -> RunSummary:
        """The fold of the complete lines of ``data`` (a last line without its newline is left)."""
        summary = cls()
        summary.add_lines(data)
        return summary

    def add_lines(self, data: bytes) -> None:
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            if line.strip():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a damaged line folds as nothing, as the watcher skips it
                if isinstance(record, dict):
                    self.add(record)


def read_run_summary(log: str | os.PathLike[str]) -> RunSummary:
    """The summary of the run the event log ``log`` holds: its summary file, with the records
    written after it folded in; rebuilt from the log where the summary is missing, unreadable,
    newer than this reader, or of another file (see the module).

    Raises:
        FileNotFoundError: when ``log`` does not exist.
    """
    path = Path(log)
    with path.open("rb") as f:
        stat = os.fstat(f.fileno())
        summary, covered, tail = _stored(path, stat)
        if covered:
            f.seek(max(covered - _TAIL, 0))
            if f.read(min(covered, _TAIL)).decode("utf-8", "replace") != tail:  # another file at that inode
                summary, covered = RunSummary(), 0
        if covered < stat.st_size:
            f.seek(covered)
            summary.add_lines(f.read(stat.st_size - covered))
    return summary


def _stored(log: Path, stat: os.stat_result) -> tuple[RunSummary, int, str]:
    """The stored summary, the bytes of the log it covers and their end; an empty fold from 0 where
    it does not fit."""
    try:
        data = json.loads(run_summary_path(log).read_text(encoding="utf-8"))
        if (
            isinstance(data, dict)
            and data.get("v") == SUMMARY_VERSION
            and data.get("log_inode") == stat.st_ino
            and isinstance(data.get("log_size"), int)
            and 0 <= data["log_size"] <= stat.st_size
            and isinstance(data.get("log_tail"), str)
        ):
            return RunSummary.from_dict(data), data["log_size"], data["log_tail"]
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        pass
    return RunSummary(), 0, ""
