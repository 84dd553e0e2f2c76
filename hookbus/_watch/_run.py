"""One watched log's current run, and the liveness model of ``hookbus watch``.

:class:`RunLog` follows the run a log shows now, with its cuts applied: a train session created
at step S behind steps already recorded (a resume, a rewind) drops the records after S, so no
curve is doubled; a ``begin`` after a ``close`` starts a new run. It keeps a bounded part of the
records (:mod:`hookbus._watch._kept`: the window the dashboard draws and the summaries it needs),
however long the log, and the facts liveness needs, all from the records: the newest step, the
worker's own rates (wall-time deltas within this one file, never the watcher's clock against
another host's), its stop and its last error.

How a run ended is the one word of :mod:`hookbus._contract._ending`: the ``close`` record's
``ended`` where it says it; in a log written before that field (or one with an ``exception``
record and no close yet) the same rule, :func:`~hookbus._contract._ending.how_ended`, applied to
the records: the first ``stop_requested`` (its ``source``: a signal or another thread stopped
it; a subscriber, the user or the cluster finished it) and the ``exception`` record (a
``KeyboardInterrupt``: stopped; any other: crashed). A run that has not ended is ``live``,
``stale`` (no new record for ``stale_after`` seconds of the watcher's clock) or ``presumed dead``
(none for ``dead_after``); ``waiting`` before its first record.

Two rates: :attr:`RunLog.average`, the run's (its own steps trained over the wall time from its
first record to its newest, as the dashboard's summary says it after "after T"), and
:attr:`RunLog.rate`, recent (over the last step records), which tells a straggler.
"""

from __future__ import annotations

import builtins
import json
import statistics
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from hookbus._contract._ending import CRASHED, DEAD, ENDINGS, FINISHED, STOPPED, how_ended
from hookbus._contract._ending import EXIT_STATUS as ENDED_STATUS
from hookbus._contract._events import StopRequest
from hookbus._contract._system import SYSTEM_PREFIX
from hookbus._watch._kept import WINDOW, KeptRecords

__all__ = [
    "EXIT_STATUS",
    "LIVE",
    "STALE",
    "WAITING",
    "WORST_FIRST",
    "RunLog",
    "WorkerStatus",
    "overall",
    "recorded_error",
]

LIVE, STALE = "live", "stale"
WAITING = "waiting"
#: The exit status of ``hookbus watch`` (``--once``, or a run's end) for each state of the run:
#: an ended run's from the one table (:data:`hookbus._contract._ending.EXIT_STATUS`), then the
#: watcher's own states.
EXIT_STATUS = {**ENDED_STATUS, LIVE: 4, STALE: 5, DEAD: 6, WAITING: 7}
#: The states, the worst first: a cluster is in the first of these any of its logs is in, and a
#: table of runs sorted by state lists them in this order.
WORST_FIRST = (CRASHED, DEAD, STALE, LIVE, WAITING, STOPPED, FINISHED)
_FLUSH_SECS = 5.0  # EventLogSink's default flush interval, for logs whose begin does not say
_STALE_INTERVALS = 3  # no record for this many expected intervals: stale
_RATE_WINDOW = 20  # step records the rate is measured over
_BATCH = 64  # train steps in a row taken at once (fewer: one by one)


@dataclass(frozen=True)
class WorkerStatus:
    """What the watcher shows of one log (one worker, or the run itself).

    Attributes:
        name: The log's name (``worker 1``, or the file's name).
        state: One of the states above.
        step: Its newest recorded global step (``None`` before one).
        rate: The run's average: its own steps (local steps in multi-worker training) per
            second of wall time from its first record to its newest (the records' times).
        recent: Its own steps per second over its last records (``None`` before two).
        examples_rate: Its examples per second over its last records that count them (``None``
            before two, or where its publisher counts no examples).
        outside: Its training thread's seconds outside the steps per step, over its last records
            (``None`` before two).
        lag: Steps its newest record is behind the furthest log's (``None`` alone).
        age: Seconds since its newest record reached the watcher (``None`` before one).
        stop: Who asked it to stop and why (``None`` when nobody did).
        error: Its last error: a sink's error or the exception it crashed with.
        straggler: Live, yet at under half the fastest live worker's recent rate.
        host: The host its newest sample of the machine was taken on (``None`` before one).
        task: Its task in multi-worker training as that sample says it (``worker:1``).
        machine: That sample's values (``system/...`` keys; ``None`` before one).
        notice: Why no GPU is sampled, as the run's first sample said it.
        sample_age: Seconds since that sample was taken, by the watcher's clock and the log's
            own times (the newest record's age, plus how far that record is after the sample).
    """

    name: str
    state: str
    step: int | None = None
    rate: float | None = None
    recent: float | None = None
    examples_rate: float | None = None
    outside: float | None = None
    lag: int | None = None
    age: float | None = None
    stop: str | None = None
    error: str | None = None
    straggler: bool = False
    host: str | None = None
    task: str | None = None
    machine: Mapping[str, float] | None = None
    notice: str | None = None
    sample_age: float | None = None


def overall(states: Iterable[str]) -> str:
    """The state of a run made of logs in ``states`` (the first of crashed, presumed dead,
    stale, live, waiting, stopped, finished among them; ``waiting`` for none)."""
    found = set(states)
    return next((state for state in WORST_FIRST if state in found), WAITING)


def recorded_error(text: str) -> BaseException:
    """An exception whose type name and message read as the recorded ``"Type: message"``
    (a builtin type is itself, so a recorded ``KeyboardInterrupt`` is one)."""
    name, _, message = str(text).partition(": ")
    known = getattr(builtins, name, None)
    if isinstance(known, type) and issubclass(known, BaseException):
        error: BaseException = known(message) if message else known()
        return error
    kind: type[Exception] = type(name if name.isidentifier() else "Error", (Exception,), {})
    return kind(message)


class RunLog:
    """The run one log shows now, cuts applied: what it says of its liveness, and the bounded
    part of its records the dashboard is rebuilt from (:class:`~hookbus._watch._kept.KeptRecords`).

    Args:
        window: Train steps kept for a rebuilt dashboard (default
            :data:`hookbus._watch._kept.WINDOW`).
    """

    def __init__(self, window: int = WINDOW) -> None:
        self.kept = KeptRecords(window)
        self._seq = 0  # records taken from the log, ever: each one's arrival number
        self._taken = 0  # records taken in the run shown
        self._clear_facts()

    @property
    def records(self) -> list[dict[str, Any]]:
        """The kept records of the run shown, decoded, in order (what a rebuilt dashboard replays)."""
        return self.kept.records()

    def _clear_facts(self) -> None:
        self.step: int | None = None
        self.closed = False
        self.ended: str | None = None  # the close record's word (None: not said, an older log)
        self.stop: str | None = None
        self.error: str | None = None
        self._first_stop: StopRequest | None = None
        self._exception: BaseException | None = None  # the exception record's, as its type
        self._first_time: float | None = None  # the run's first record's wall time
        self._done = 0  # own steps trained in the run's earlier train sessions
        self._session_from: int | None = None  # the own step the current train session counts from
        self._own: int | None = None  # the newest own step of the current train session
        self._local = False  # whether own steps are a worker's local steps
        self.flush_secs = _FLUSH_SECS
        self._points: deque[tuple[float, int]] = deque(maxlen=_RATE_WINDOW)  # (wall time, own step)
        # (wall time, own step, examples, seconds outside) of the last train records that carry either
        self._figures: deque[tuple[float, int, int | None, float | None]] = deque(maxlen=_RATE_WINDOW)
        self._gaps: deque[float] = deque(maxlen=_RATE_WINDOW)
        self._last_time: float | None = None
        self.sample: dict[str, float] | None = None  # the newest sample of the machine's values
        self.host: str | None = None
        self.task: str | None = None
        self.notice: str | None = None
        self._sample_time: float | None = None

    def clear(self) -> None:
        """Forget everything (the file is read again from the start)."""
        self.kept.clear()
        self._taken = 0
        self._clear_facts()

    def add(self, line: str, record: dict[str, Any]) -> bool:
        """Take one record, ``record`` as written (``line`` parsed: a step's values at the top
        level, see :func:`~hookbus._contract._event_log.parsed`); whether it cut or replaced what was
        shown (the view is rebuilt)."""
        kind = record["record"]
        if kind == "step":  # the bulk of a log: never a cut
            seq = self._seq = self._seq + 1
            self._taken += 1
            step, mode = record.get("step"), record.get("mode", "train")
            train = mode == "train" and "final" not in record
            self.kept.keep_step(seq, line, record, step, mode)
            self._note_step(record, step, train)
            return False
        step = record.get("step")
        rebuilt = False
        # A next run in the same log; a test evaluation after the run (model.evaluate, which opens a
        # run of its own outside `with bus:`) is shown with the run it evaluated.
        if kind == "begin" and self.closed and record.get("mode", "train") != "test":
            self.kept.clear()
            self._taken = 0
            self._clear_facts()
            rebuilt = True
        elif (
            kind == "session_created"
            and record.get("mode", "train") == "train"
            and type(step) is int
            and self.step is not None
            and self.step > step
        ):  # a resume or a rewind behind what was shown: what came after S is gone
            self.kept.cut(step)
            self._clear_facts()
            for kept in self.kept.lines():
                self._note(json.loads(kept))
            rebuilt = True
        self._seq += 1
        self._taken += 1
        self.kept.keep(self._seq, line, record)
        self._note(record)
        return rebuilt

    def add_all(self, lines: Sequence[str], records: Sequence[dict[str, Any]]) -> bool:
        """:meth:`add` for each record in turn; whether any cut or replaced what was shown. Runs of
        plain train steps (a first read of a long log is almost nothing else) are taken at once,
        by columns, with the same outcome as one by one."""
        kinds = list(map(dict.get, records, repeat("record")))
        modes = list(map(dict.get, records, repeat("mode")))
        others = [
            i for i, (kind, mode) in enumerate(zip(kinds, modes, strict=True)) if kind != "step" or mode != "train"
        ]
        rebuilt, start = False, 0
        for end in (*others, len(records)):
            if end - start < _BATCH or not self._add_train(lines[start:end], records[start:end]):
                for index in range(start, end):
                    rebuilt = self.add(lines[index], records[index]) or rebuilt
            if end < len(records):
                rebuilt = self.add(lines[end], records[end]) or rebuilt
            start = end + 1
        return rebuilt

    def _add_train(self, lines: Sequence[str], records: Sequence[dict[str, Any]]) -> bool:
        """:meth:`add` for many train step records at once; ``False`` (nothing taken) unless each
        has an int step and a float wall time and none is at-end or a worker's (local steps)."""
        steps: list[Any] = list(map(dict.get, records, repeat("step")))
        whens: list[Any] = list(map(dict.get, records, repeat("wall_time")))
        if set(map(type, steps)) != {int} or set(map(type, whens)) != {float}:
            return False
        for field in ("final", "local_step"):
            if any(map(dict.__contains__, records, repeat(field))):
                return False
        seq = self._seq
        self._seq += len(records)
        self._taken += len(records)
        self.kept.keep_train(seq, lines, records, steps)
        # _note_step's facts: the times (first, last, the last gaps that went forward) ...
        if self._first_time is None:
            self._first_time = whens[0]
        times: list[float] = whens if self._last_time is None else [self._last_time, *whens]
        gaps: list[float] = []
        for index in range(len(times) - 1, 0, -1):  # from the newest: the deque keeps the last ones
            if times[index] >= times[index - 1]:
                gaps.append(times[index] - times[index - 1])
                if len(gaps) == _RATE_WINDOW:
                    break
        self._gaps.extend(reversed(gaps))
        self._last_time = whens[-1]
        # ... and the steps: own steps are the global ones, counted from 0 unless a session said.
        if self._own is None and self._session_from is None:
            self._session_from = 0
        self._local, self._own = False, steps[-1]
        self._points.extend(zip(whens[-_RATE_WINDOW:], steps[-_RATE_WINDOW:], strict=True))
        for record, when, step in zip(
            records[-_RATE_WINDOW:], whens[-_RATE_WINDOW:], steps[-_RATE_WINDOW:], strict=True
        ):
            self._note_figures(record, when, step)
        newest = max(steps)
        if self.step is None or newest > self.step:
            self.step = newest
        return True

    def _note_step(self, record: dict[str, Any], step: Any, train: bool) -> None:
        """:meth:`_note` for a step record (its ``step``; ``train``: a train step, not at-end),
        the log's bulk: the same facts, without the other kinds' branches."""
        when = record.get("wall_time")
        if isinstance(when, int | float):
            self._note_time(when)
        if type(step) is not int:
            return
        if train:
            local = record.get("local_step")
            if type(local) is int:
                if self._own is None:
                    self._session_from = 0  # a worker counts its own (local) steps from its start
                self._local, own = True, local
            else:
                if self._own is None and self._session_from is None:
                    self._session_from = 0
                self._local, own = False, step
            self._own = own
            if isinstance(when, int | float):
                self._points.append((float(when), own))
                self._note_figures(record, float(when), own)
        if self.step is None or step > self.step:
            self.step = step

    def _note_figures(self, record: dict[str, Any], when: float, own: int) -> None:
        """A train step record's examples and time outside the steps (the fields ``trained_examples`` and
        ``outside_secs``), where it has them."""
        examples, outside = record.get("trained_examples"), record.get("outside_secs")
        if type(examples) is not int:
            examples = None
        if not isinstance(outside, int | float):
            outside = None
        if examples is not None or outside is not None:
            self._figures.append((when, own, examples, None if outside is None else float(outside)))

    def _note_time(self, when: float) -> None:
        if self._first_time is None:
            self._first_time = float(when)
        if self._last_time is not None and when >= self._last_time:
            self._gaps.append(when - self._last_time)
        self._last_time = float(when)

    def _note(self, record: dict[str, Any]) -> None:
        kind, step, when = record["record"], record.get("step"), record.get("wall_time")
        if kind == "step":
            train = record.get("mode", "train") == "train" and "final" not in record
            self._note_step(record, record.get("step"), train)
            return
        if isinstance(when, int | float):
            self._note_time(when)
        if kind == "begin":
            flush = record.get("flush_secs")
            if isinstance(flush, int | float) and flush > 0:
                self.flush_secs = float(flush)
        elif kind == "session_created" and record.get("mode", "train") == "train":
            self._points.clear()  # a resume point: the rate starts anew
            self._figures.clear()
            self._end_session()
            self._session_from, self._own = (step if isinstance(step, int) else 0), None
        elif kind == "stop_requested" and self.stop is None:
            reason, source = str(record.get("reason")), str(record.get("source"))
            self.stop = f"{reason} ({source}, step {step})"
            self._first_stop = StopRequest(reason, source, step if isinstance(step, int) else 0, float(when or 0.0))
        elif kind == "subscriber_error":
            self.error = f"{record.get('subscriber')}: {record.get('error')}"
        elif kind == "exception":
            self.error = str(record.get("error"))
            self._exception = recorded_error(self.error)
        elif kind == "end" and record.get("mode", "train") == "train" and isinstance(step, int):
            if self._own is not None and not self._local:
                self._own = max(self._own, step)  # the step training ended at (a sampled log: after the last record)
        elif kind == "system":
            self.sample = {k: v for k, v in record.items() if k.startswith(SYSTEM_PREFIX) and type(v) is float}
            host, task, notice = record.get("host"), record.get("task"), record.get("notice")
            self.host = None if host is None else str(host)
            self.task = None if task is None else str(task)
            if isinstance(notice, str):
                self.notice = notice
            self._sample_time = float(when) if isinstance(when, int | float) else None
        elif kind == "close":
            self.closed = True
            ended = record.get("ended")
            self.ended = ended if ended in ENDINGS else None

    def _end_session(self) -> None:
        if self._session_from is not None and self._own is not None:
            self._done += max(0, self._own - self._session_from)

    @property
    def how_ended(self) -> str | None:
        """How the run ended (finished, stopped, crashed), ``None`` while it has not: the close
        record's word, or the one rule applied to its stop and exception records."""
        if self.closed and self.ended is not None:
            return self.ended
        if self.closed or self._exception is not None:
            return how_ended(self._first_stop, self._exception)
        return None

    @property
    def sample_behind(self) -> float | None:
        """Seconds the newest sample of the machine was taken before the newest record (the
        log's own times; ``None`` before a sample)."""
        if self._sample_time is None or self._last_time is None:
            return None
        return max(0.0, self._last_time - self._sample_time)

    @property
    def average(self) -> float | None:
        """The run's average rate: own steps its train sessions trained, per second of wall time
        from its first record to its newest (``None`` before a train step)."""
        if self._session_from is None or self._own is None or self._first_time is None or self._last_time is None:
            return None
        elapsed = self._last_time - self._first_time
        trained = self._done + max(0, self._own - self._session_from)
        return trained / elapsed if elapsed > 0 else None

    @property
    def rate(self) -> float | None:
        """Recent: own steps per second over the last step records (their wall times), if two or more."""
        if len(self._points) < 2:
            return None
        (t0, s0), (t1, s1) = self._points[0], self._points[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 >= s0 else None

    @property
    def examples_rate(self) -> float | None:
        """Recent: examples per second over the last train records that count them, if two or more."""
        counted = [(t, e) for t, _, e, _ in self._figures if e is not None]
        if len(counted) < 2:
            return None
        (t0, e0), (t1, e1) = counted[0], counted[-1]
        return (e1 - e0) / (t1 - t0) if t1 > t0 and e1 >= e0 else None

    @property
    def outside(self) -> float | None:
        """Recent: the training thread's seconds outside the steps per own step, over the last train
        records that carry it, if two or more."""
        measured = [(s, o) for _, s, _, o in self._figures if o is not None]
        if len(measured) < 2:
            return None
        (s0, o0), (s1, o1) = measured[0], measured[-1]
        return max(0.0, o1 - o0) / (s1 - s0) if s1 > s0 else None

    def stale_after(self) -> float:
        """Seconds without a new record after which the log is stale: a few expected intervals
        (the writer's flush interval, or the records' typical spacing when that is longer)."""
        spacing = statistics.median(self._gaps) if self._gaps else 0.0
        return _STALE_INTERVALS * max(self.flush_secs, spacing)

    def state(self, age: float | None, stale_after: float, dead_after: float) -> str:
        """The run's state, ``age`` seconds after its newest record reached the watcher."""
        if not self._taken:
            return WAITING
        ended = self.how_ended
        if ended is not None:
            return ended
        if age is not None and age > dead_after:
            return DEAD
        if age is not None and age > stale_after:
            return STALE
        return LIVE
