"""One watched log's current run, and the liveness model of ``hookbus watch``.

:class:`RunLog` holds the records of the run a log shows now, with its cuts applied: a train
session created at step S behind steps already recorded (a resume, a rewind) drops the records
after S, so no curve is doubled; a ``begin`` after a ``close`` starts a new run. It also keeps the
facts liveness needs, all from the records: the newest step, the worker's own rate (wall-time
deltas within this one file, never the watcher's clock against another host's), its stop and
its last error.

A run is, in this order: ``crashed`` (an ``exception`` record), ``stopped`` (closed after a stop
request, with its reason), ``finished`` (closed), and otherwise ``live``, ``stale`` (no new record
for ``stale_after`` seconds of the watcher's clock) or ``presumed dead`` (none for
``dead_after``); ``waiting`` before its first record.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CRASHED",
    "DEAD",
    "EXIT_STATUS",
    "FINISHED",
    "LIVE",
    "STALE",
    "STOPPED",
    "WAITING",
    "RunLog",
    "WorkerStatus",
    "overall",
]

LIVE, STALE, DEAD = "live", "stale", "presumed dead"
FINISHED, STOPPED, CRASHED, WAITING = "finished", "stopped", "crashed", "waiting"
#: The exit status of ``hookbus watch`` (``--once``, or a run's end) for each state of the run.
EXIT_STATUS = {FINISHED: 0, CRASHED: 1, STOPPED: 3, LIVE: 4, STALE: 5, DEAD: 6, WAITING: 7}
# Which state a cluster is in: the first of these any of its logs is in.
_PRECEDENCE = (CRASHED, DEAD, STALE, LIVE, WAITING, STOPPED, FINISHED)
_FLUSH_SECS = 5.0  # EventLogSink's default flush interval, for logs whose begin does not say
_STALE_INTERVALS = 3  # no record for this many expected intervals: stale
_RATE_WINDOW = 20  # step records the rate is measured over


@dataclass(frozen=True)
class WorkerStatus:
    """What the watcher shows of one log (one worker, or the run itself).

    Attributes:
        name: The log's name (``worker 1``, or the file's name).
        state: One of the states above.
        step: Its newest recorded global step (``None`` before one).
        rate: Its own steps per second over its last records (local steps in multi-worker
            training), from the records' wall times.
        lag: Steps its newest record is behind the furthest log's (``None`` alone).
        age: Seconds since its newest record reached the watcher (``None`` before one).
        stop: Who asked it to stop and why (``None`` when nobody did).
        error: Its last error: a sink's error or the exception it crashed with.
        straggler: Live, yet at under half the fastest live worker's rate.
    """

    name: str
    state: str
    step: int | None = None
    rate: float | None = None
    lag: int | None = None
    age: float | None = None
    stop: str | None = None
    error: str | None = None
    straggler: bool = False


def overall(states: Iterable[str]) -> str:
    """The state of a run made of logs in ``states`` (the first of crashed, presumed dead,
    stale, live, waiting, stopped, finished among them; ``waiting`` for none)."""
    found = set(states)
    return next((state for state in _PRECEDENCE if state in found), WAITING)


def _after(record: dict[str, Any], step: int) -> bool:
    at = record.get("step")
    return isinstance(at, int) and at > step


class RunLog:
    """The records of the run one log shows now, cuts applied, and what they say of its liveness."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._clear_facts()

    def _clear_facts(self) -> None:
        self.step: int | None = None
        self.closed = False
        self.crashed = False
        self.stop: str | None = None
        self.error: str | None = None
        self.flush_secs = _FLUSH_SECS
        self._points: deque[tuple[float, int]] = deque(maxlen=_RATE_WINDOW)  # (wall time, own step)
        self._gaps: deque[float] = deque(maxlen=_RATE_WINDOW)
        self._last_time: float | None = None

    def clear(self) -> None:
        """Forget everything (the file is read again from the start)."""
        self.records = []
        self._clear_facts()

    def add(self, record: dict[str, Any]) -> bool:
        """Take one record; whether it cut or replaced what was shown (the view is rebuilt)."""
        kind, step = record["record"], record.get("step")
        rebuilt = False
        if kind == "begin" and self.closed:  # a next run in the same log
            self.records, rebuilt = [], True
        elif (
            kind == "session_created"
            and record.get("mode", "train") == "train"
            and isinstance(step, int)
            and any(_after(r, step) for r in self.records if r["record"] == "step")
        ):  # a resume or a rewind behind what was shown: what came after S is gone
            self.records = [r for r in self.records if r["record"] == "begin" or not _after(r, step)]
            rebuilt = True
        self.records.append(record)
        if rebuilt:
            self._clear_facts()
            for kept in self.records:
                self._note(kept)
        else:
            self._note(record)
        return rebuilt

    def _note(self, record: dict[str, Any]) -> None:
        kind, step, when = record["record"], record.get("step"), record.get("wall_time")
        if isinstance(when, int | float):
            if self._last_time is not None and when >= self._last_time:
                self._gaps.append(when - self._last_time)
            self._last_time = float(when)
        if kind == "begin":
            flush = record.get("flush_secs")
            if isinstance(flush, int | float) and flush > 0:
                self.flush_secs = float(flush)
        elif kind == "session_created" and record.get("mode", "train") == "train":
            self._points.clear()  # a resume point: the rate starts anew
        elif kind == "step" and isinstance(step, int):
            if record.get("mode", "train") == "train" and not record.get("final"):
                own = record.get("local_step")
                if isinstance(when, int | float):
                    self._points.append((float(when), own if isinstance(own, int) else step))
            self.step = step if self.step is None else max(self.step, step)
        elif kind == "stop_requested" and self.stop is None:
            self.stop = f"{record.get('reason')} ({record.get('source')}, step {step})"
        elif kind == "subscriber_error":
            self.error = f"{record.get('subscriber')}: {record.get('error')}"
        elif kind == "exception":
            self.crashed, self.error = True, str(record.get("error"))
        elif kind == "close":
            self.closed = True

    @property
    def rate(self) -> float | None:
        """Own steps per second over the last step records (their wall times), if two or more."""
        if len(self._points) < 2:
            return None
        (t0, s0), (t1, s1) = self._points[0], self._points[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 >= s0 else None

    def stale_after(self) -> float:
        """Seconds without a new record after which the log is stale: a few expected intervals
        (the writer's flush interval, or the records' typical spacing when that is longer)."""
        spacing = statistics.median(self._gaps) if self._gaps else 0.0
        return _STALE_INTERVALS * max(self.flush_secs, spacing)

    def state(self, age: float | None, stale_after: float, dead_after: float) -> str:
        """The run's state, ``age`` seconds after its newest record reached the watcher."""
        if not self.records:
            return WAITING
        if self.crashed:
            return CRASHED
        if self.closed:
            return STOPPED if self.stop is not None else FINISHED
        if age is not None and age > dead_after:
            return DEAD
        if age is not None and age > stale_after:
            return STALE
        return LIVE
