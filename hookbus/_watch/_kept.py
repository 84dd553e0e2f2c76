"""What a watched run keeps of its records: the window the dashboard draws, and its summaries.

A log grows without end (a million steps are 145 MB of JSON lines); the watcher's memory must
not. :class:`KeptRecords` holds, as the lines they were written as, only what a rebuilt dashboard
needs to show what the full log would show:

- the last ``window`` train steps (the curves and sparklines; the console sink keeps 40 values a
  key), and as many evaluations and epochs, and the last few at-end records;
- for every key, the record with its lowest and the one with its highest finite value (the
  dashboard's "best", whichever its direction), the first of equal ones;
- the run's structure: its first ``begin`` (the run's start, its keys and total), the last
  begins, sessions, ends and start gates, the last checkpoints, the first stops and
  exceptions, each subscriber's last error;
- the machine: the newest sample (``system`` record), and the first that said why no GPU is
  sampled (its ``notice``).

A cut (a train session created at step S behind the steps recorded: a resume, a rewind) drops
everything after S and must still know each key's best up to S. So each checkpoint record keeps
the bests as they were when it was written (the last 16 checkpoints): a key whose best was after
S takes the best of the newest of them at or before S and of the records kept up to S. That is
exact for a resume from one of the last 16 checkpoints the log recorded (a resume restores a
checkpoint: S is its step; ``CheckpointSink`` keeps 5); otherwise it is the best of what was kept.

:func:`~hookbus._contract._event_log.parsed` (the event log's) turns many lines into records in
one call of the JSON decoder (as one array), validating each record as ``decode_line`` does and
falling back to it, line by line, to name a line that is not a record.
:meth:`KeptRecords.keep_train` takes a run of train steps at once (a first read of a long log is
almost nothing else): the window's last lines, and each key's extremes from the column of its
values (``min``, ``max``, ``index``: the first of equal ones), exactly what taking them one by one
keeps.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any

from hookbus._contract._event_log import decode_line

__all__ = ["EVENTS", "WINDOW", "KeptRecords", "shown"]

#: Train steps (and evaluations, and epochs) a rebuilt dashboard replays: its curves' window.
WINDOW = 256
#: Begins, sessions, ends and start gates kept (a run of more sessions keeps the newest).
EVENTS = 256
_CHECKPOINTS = 16  # the last checkpoints (their steps are where a resume cuts)
_FIRST = 8  # the first stops and exceptions kept
_FINALS = 4  # the last at-end records
# A step record's fields besides its values (the event log's format).
_FIELDS = frozenset({"v", "record", "step", "wall_time", "elapsed", "mode", "final", "task", "local_step"})

Kept = tuple[int, int, str]  # (arrival number, step, the line as written)
# A key's extremes: [lowest, its arrival, its step, its line, highest, its arrival, its step, its line]
Best = list[Any]


def shown(records: Sequence[dict[str, Any]], tail: int) -> set[int]:
    """Which of many new ``records`` (as written) a dashboard must be given to show what all of
    them would: every record but the train steps, the last ``tail`` train steps (the curves),
    and the train steps holding each key's lowest and highest finite value among them (the
    bests; the first of equal ones). Their indices."""
    train = [
        i
        for i, r in enumerate(records)
        if r["record"] == "step" and r.get("mode", "train") == "train" and "final" not in r
    ]
    chosen = set(range(len(records))).difference(train)
    chosen.update(train[-tail:])
    extremes: dict[str, list[Any]] = {}  # key: [lowest, its index, highest, its index]
    for i in train:
        for key, value in _values(records[i]):
            if value - value != 0.0:  # not finite
                continue
            found = extremes.get(key)
            if found is None:
                extremes[key] = [value, i, value, i]
            elif value < found[0]:
                found[0:2] = value, i
            elif value > found[2]:
                found[2:4] = value, i
    for found in extremes.values():
        chosen.update((found[1], found[3]))
    return chosen


def _values(record: dict[str, Any]) -> Iterator[tuple[str, float]]:
    """A step record's float values, as written (top level, or nested under ``values``)."""
    for key, value in record.items():
        if type(value) is float and key not in _FIELDS:
            yield key, value
    nested = record.get("values")
    if type(nested) is dict:
        for key, value in nested.items():
            if type(value) is float:
                yield key, value


def _better(best: Best, value: float, seq: int, step: int, line: str) -> None:
    if value < best[0] or (value == best[0] and seq < best[1]):
        best[0:4] = value, seq, step, line
    if value > best[4] or (value == best[4] and seq < best[5]):
        best[4:8] = value, seq, step, line


class KeptRecords:
    """The bounded part of a run's records a dashboard is rebuilt from (see the module).

    Args:
        window: Train steps kept (and evaluations, and epochs); default :data:`WINDOW`.
    """

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self.clear()

    def clear(self) -> None:
        """Forget everything."""
        self._first_begin: Kept | None = None
        self._begins: deque[Kept] = deque(maxlen=EVENTS)
        self._events: deque[Kept] = deque(maxlen=EVENTS)  # sessions, ends, start gates, the close
        self._train: deque[Kept] = deque(maxlen=self.window)
        self._evals: deque[Kept] = deque(maxlen=self.window)
        self._tests: deque[Kept] = deque(maxlen=self.window)  # test evaluations: never cut by a resume
        self._epochs: deque[Kept] = deque(maxlen=self.window)
        self._finals: deque[Kept] = deque(maxlen=_FINALS)
        self._checkpoints: deque[tuple[Kept, dict[str, Best]]] = deque(maxlen=_CHECKPOINTS)
        self._stops: list[Kept] = []
        self._exceptions: list[Kept] = []
        self._errors: dict[str, Kept] = {}
        self._system: deque[Kept] = deque(maxlen=1)  # the newest sample of the machine
        self._notice: Kept | None = None  # the sample that said why no GPU is sampled
        self.bests: dict[str, Best] = {}

    def __len__(self) -> int:
        """How many records are kept (bounded, however long the log)."""
        return len(self._all())

    def keep(self, seq: int, line: str, record: dict[str, Any]) -> None:
        """Keep what ``record`` (arrival number ``seq``, written as ``line``) adds to the summaries."""
        kind, step = record["record"], record.get("step")
        kept = (seq, step if type(step) is int else 0, line)
        if kind == "step":
            self.keep_step(seq, line, record, step, record.get("mode", "train"))
        elif kind == "begin":
            if self._first_begin is None:
                self._first_begin = kept
            else:
                self._begins.append(kept)
        elif kind in ("session_created", "end", "waiting_for_step", "close"):
            self._events.append(kept)
        elif kind == "checkpoint_saved":
            self._checkpoints.append((kept, {key: list(best) for key, best in self.bests.items()}))
        elif kind == "stop_requested":
            if len(self._stops) < _FIRST:
                self._stops.append(kept)
        elif kind == "exception":
            if len(self._exceptions) < _FIRST:
                self._exceptions.append(kept)
        elif kind == "subscriber_error":
            self._errors[str(record.get("subscriber"))] = kept
        elif kind == "system":
            self._system.append(kept)
            if self._notice is None and "notice" in record:
                self._notice = kept
        # status records (the other sinks' status lines) are not drawn by the watcher

    def keep_step(self, seq: int, line: str, record: dict[str, Any], step: Any, mode: Any) -> None:
        """:meth:`keep` for a step record (the log's bulk; its ``step`` and ``mode``), in fewer steps."""
        if type(step) is not int:
            step = 0
        kept = (seq, step, line)
        if "final" in record:
            self._finals.append(kept)
        elif mode == "train":
            self._train.append(kept)
        elif mode == "eval":
            self._evals.append(kept)
        elif mode == "test":
            self._tests.append(kept)
        elif mode == "epoch":
            self._epochs.append(kept)
        else:
            self._train.append(kept)
        bests, fields = self.bests, _FIELDS
        for key, value in record.items():
            # A float not finite (NaN: x - x is NaN; infinities: inf - inf is NaN) is never a best;
            # seq only grows here, so a later equal value never displaces the first.
            if type(value) is not float or key in fields or value - value != 0.0:
                if key == "values" and type(value) is dict:
                    self._fold_nested(kept, value)
                continue
            best = bests.get(key)
            if best is None:
                bests[key] = [value, seq, step, line, value, seq, step, line]
            elif value < best[0]:
                best[0:4] = value, seq, step, line
            elif value > best[4]:
                best[4:8] = value, seq, step, line

    def keep_train(
        self, seq: int, lines: Sequence[str], records: Sequence[dict[str, Any]], steps: Sequence[int]
    ) -> None:
        """:meth:`keep_step` for each of many train steps (arrival numbers from ``seq + 1``, steps
        ``steps``, none at-end), at once: the last ``window`` of them, and each key's extremes
        from the column of its values. A column that is not all finite floats (a key some records
        lack, a NaN) or nested values take the records one by one, as :meth:`keep_step` does."""
        count = len(records)
        columns: list[tuple[str, list[Any]]] = []
        for key in set().union(*records).difference(_FIELDS):
            column: list[Any] = list(map(dict.get, records, repeat(key)))
            kinds = set(map(type, column))
            if float not in kinds and key != "values":
                continue  # no value of this key (arrays, skipped keys): never a best
            # A sum of finite floats is finite unless it overflows (then: one by one, as a NaN is).
            if key == "values" or kinds != {float} or not math.isfinite(sum(column)):
                for number, (line, record, step) in enumerate(zip(lines, records, steps, strict=True), seq + 1):
                    self.keep_step(number, line, record, step, "train")
                return
            columns.append((key, column))
        start = max(0, count - self.window)
        self._train.extend(zip(range(seq + 1 + start, seq + 1 + count), steps[start:], lines[start:], strict=True))
        bests = self.bests
        for key, column in columns:
            low, high = min(column), max(column)
            at_low, at_high = column.index(low), column.index(high)  # the first of equal ones
            best = bests.get(key)
            if best is None:
                bests[key] = [low, seq + 1 + at_low, steps[at_low], lines[at_low]]
                bests[key] += [high, seq + 1 + at_high, steps[at_high], lines[at_high]]
                continue
            if low < best[0]:
                best[0:4] = low, seq + 1 + at_low, steps[at_low], lines[at_low]
            if high > best[4]:
                best[4:8] = high, seq + 1 + at_high, steps[at_high], lines[at_high]

    def _fold_nested(self, kept: Kept, values: dict[str, Any]) -> None:
        """The values a step record nests under ``values`` (keys that are record fields)."""
        for key, value in values.items():
            if type(value) is float and value - value == 0.0:
                self._merge(key, [value, *kept] * 2)

    def cut(self, step: int) -> None:
        """Drop every record after ``step`` but the begins (a session created at ``step``)."""
        for group in (self._begins, self._events, self._train, self._evals, self._epochs, self._finals, self._system):
            survivors = [k for k in group if k[1] <= step]
            group.clear()
            group.extend(survivors)
        self._checkpoints = deque((c for c in self._checkpoints if c[0][1] <= step), maxlen=_CHECKPOINTS)
        self._stops = [k for k in self._stops if k[1] <= step]
        self._exceptions = [k for k in self._exceptions if k[1] <= step]
        self._errors = {name: k for name, k in self._errors.items() if k[1] <= step}
        if self._notice is not None and self._notice[1] > step:
            self._notice = None
        base = self._checkpoints[-1][1] if self._checkpoints else {}
        lost = {key for key, best in self.bests.items() if best[2] > step or best[6] > step}
        for key in lost:
            best = self.bests.pop(key)
            if best[2] <= step:
                self.bests[key] = [*best[0:4], *best[0:4]]  # its lowest stands; its highest is sought again
            elif best[6] <= step:
                self.bests[key] = [*best[4:8], *best[4:8]]
            if key in base:
                self._merge(key, base[key])
        for kept in (*self._train, *self._evals, *self._tests, *self._epochs, *self._finals):
            self._refold(lost, kept)

    def _merge(self, key: str, other: Best) -> None:
        best = self.bests.get(key)
        if best is None:
            self.bests[key] = list(other)
            return
        _better(best, other[0], other[1], other[2], other[3])
        _better(best, other[4], other[5], other[6], other[7])

    def _refold(self, keys: set[str], kept: Kept) -> None:
        if not keys:
            return
        record = json.loads(kept[2])
        for key, value in _values(record):
            if key in keys and value - value == 0.0:
                self._merge(key, [value, *kept] * 2)

    def _all(self) -> dict[int, str]:
        lines: dict[int, str] = {}
        singles = [kept for kept in (self._first_begin, self._notice) if kept is not None]
        for group in (
            singles,
            self._begins,
            self._events,
            self._train,
            self._evals,
            self._tests,
            self._epochs,
            self._finals,
            [c[0] for c in self._checkpoints],
            self._stops,
            self._exceptions,
            self._errors.values(),
            self._system,
        ):
            for seq, _, line in group:
                lines[seq] = line
        for best in self.bests.values():
            lines[best[1]], lines[best[5]] = best[3], best[7]
        return lines

    def lines(self) -> list[str]:
        """The kept records' lines, in the order they were written."""
        kept = self._all()
        return [kept[seq] for seq in sorted(kept)]

    def records(self) -> list[dict[str, Any]]:
        """The kept records, decoded (:func:`~hookbus._contract._event_log.decode_line`), in order."""
        return [decode_line(line) for line in self.lines()]
