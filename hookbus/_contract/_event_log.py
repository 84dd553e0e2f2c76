"""The event log's format: a run as one JSON object per line, written by ``EventLogSink``.

Every record has ``v`` (the format version), ``record`` (its kind), ``step`` and ``wall_time``.
Step records (``record: "step"``: train, eval, epoch and at-end events) carry their scalar values
as top-level fields, so ``pandas.read_json(path, lines=True)`` gives one float column per key;
NaN and infinities are written ``NaN``, ``Infinity`` and ``-Infinity`` (what Python's ``json``
and pandas read as floats). A key that would collide with a record field is nested under
``values`` instead. Arrays are summarised under ``arrays`` (shape, dtype, and for numbers min,
max, mean and the count of non-finite entries); ``bytes`` (serialized summaries) and other
values are not recorded, only named in ``skipped``.

A ``system`` record is a sample of the machine (the bus's ``system`` signal): ``step`` (the latest
training step then: flat while training is stalled), ``wall_time``, ``elapsed``, ``task`` in
multi-worker training, ``host`` (the name of the machine sampled: workers that share a host sample
it each, and a cluster view counts its host figures once), and its values as top-level fields
named ``system/...`` (MLflow's system metric names; see :mod:`hookbus.sink_api`'s ``SYSTEM_*``);
the first one of a run where no GPU is sampled carries ``notice``, the sentence that says why. A
replay publishes them, as recorded, on its bus's ``system`` signal (it samples no machine of its
own); ``pandas.read_json`` gives them their own
columns, and ``record == "system"`` selects them.

The ``close`` record (the run closed) carries ``ended``: how the run ended in one word,
``"finished"``, ``"stopped"`` or ``"crashed"`` (:func:`hookbus.sink_api.how_ended`). Logs written
before it have no ``ended``: a reader takes its absence as "not said". A field added to a record
keeps the version (a reader ignores the fields it does not know); the version grows only when
an older reader would misread a record.

The writer writes whole lines only; a reader ignores a last line without its newline (a write
in progress, or one a kill tore). :func:`read_event_log` is that reader.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from hookbus._contract._events import CheckpointSaved, Event, ExceptionRaised, StopRequest, SubscriberError, WaitForStep
from hookbus._contract._system import SYSTEM_NOTICE_KEY, SYSTEM_PREFIX, SYSTEM_SIGNAL

__all__ = [
    "EVENT_LOG_VERSION",
    "RECORDS",
    "STEP_FIELDS",
    "encode_record",
    "event_log_line",
    "event_log_record",
    "iter_event_log",
    "iter_event_log_shapes",
    "parsed",
    "read_event_log",
]

#: The format version every record carries as ``v``; a reader refuses newer ones.
EVENT_LOG_VERSION = 1
#: The record kinds, in the order a run produces them.
RECORDS = (
    "begin",
    "session_created",
    "waiting_for_step",
    "step",
    "system",
    "checkpoint_saved",
    "stop_requested",
    "subscriber_error",
    "exception",
    "status",
    "end",
    "close",
)
#: The fields of a step record besides its values: a value whose key is one of these is nested
#: (and a reader folding the values, the run summary, skips them).
STEP_FIELDS = frozenset(
    {"v", "record", "step", "wall_time", "elapsed", "mode", "final", "task", "local_step"}
    | {"arrays", "skipped", "values"}
    | {"trained_examples", "outside_secs"}  # a train step's Event.examples and Event.outside_secs, where known
)
Payload = Event | CheckpointSaved | StopRequest | SubscriberError | ExceptionRaised | WaitForStep


def _summary(array: np.ndarray[Any, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {"shape": list(array.shape), "dtype": str(array.dtype)}
    if array.dtype.kind in "biuf" and array.size:
        values = np.asarray(array, dtype=np.float64).ravel()
        finite = values[np.isfinite(values)]
        summary["nonfinite"] = int(values.size - finite.size)
        if finite.size:
            summary.update(min=float(finite.min()), max=float(finite.max()), mean=float(finite.mean()))
    return summary


def _step_record(event: Event) -> dict[str, Any]:
    record: dict[str, Any] = {
        "v": EVENT_LOG_VERSION,
        "record": "step",
        "step": event.step,
        "wall_time": event.wall_time,
        "elapsed": event.elapsed,
        "mode": event.mode,
    }
    if event.final:
        record["final"] = True
    if event.task_type is not None:
        record["task"] = f"{event.task_type}:{event.task_index}"
        record["local_step"] = event.local_step
    if event.examples is not None:
        record["trained_examples"] = event.examples
    if event.outside_secs is not None:
        record["outside_secs"] = event.outside_secs
    nested: dict[str, float] = {}
    arrays: dict[str, Any] = {}
    skipped: list[str] = []
    for key, value in event.values.items():
        if isinstance(value, float):
            (nested if key in STEP_FIELDS else record)[key] = value
        elif isinstance(value, np.ndarray):
            arrays[key] = _summary(value)
        else:
            skipped.append(key)
    if nested:
        record["values"] = nested
    if arrays:
        record["arrays"] = arrays
    if skipped:
        record["skipped"] = sorted(skipped)
    return record


def _system_record(event: Event) -> dict[str, Any]:
    record: dict[str, Any] = {
        "v": EVENT_LOG_VERSION,
        "record": "system",
        "step": event.step,
        "wall_time": event.wall_time,
        "elapsed": event.elapsed,
    }
    if event.task_type is not None:
        record["task"] = f"{event.task_type}:{event.task_index}"
        record["local_step"] = event.local_step
    for key, value in event.values.items():
        if key == SYSTEM_NOTICE_KEY:
            record["notice"] = str(value)
        elif isinstance(value, float) and key.startswith(SYSTEM_PREFIX):
            record[key] = value
    return record


def _record(payload: Payload | str, fields: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(payload, str):
        return {"v": EVENT_LOG_VERSION, "record": payload, **fields}
    head: dict[str, Any] = {"v": EVENT_LOG_VERSION}
    if isinstance(payload, Event):
        if payload.signal == "after_run":
            return {**_step_record(payload), **fields}
        if payload.signal == SYSTEM_SIGNAL:
            return {**_system_record(payload), **fields}
        head.update(record=payload.signal, step=payload.step, wall_time=payload.wall_time, mode=payload.mode)
        if payload.signal == "session_created":
            head.update(restored=payload.restored, rewound=payload.rewound)
    elif isinstance(payload, CheckpointSaved):
        head.update(record="checkpoint_saved", step=payload.step, path=payload.path, value=payload.value)
    elif isinstance(payload, StopRequest):
        head.update(
            record="stop_requested",
            step=payload.step,
            wall_time=payload.wall_time,
            reason=payload.reason,
            source=payload.source,
        )
    elif isinstance(payload, SubscriberError):
        head.update(
            record="subscriber_error",
            step=payload.step,
            subscriber=payload.subscriber,
            signal=payload.signal,
            error=f"{type(payload.error).__name__}: {payload.error}",
            count=payload.count,
            policy=payload.policy,
        )
    elif isinstance(payload, WaitForStep):
        head.update(
            record="waiting_for_step",
            step=payload.step,
            wall_time=payload.wall_time,
            state=payload.state,
            until_step=payload.until_step,
            waited_secs=payload.waited_secs,
            timeout_secs=payload.timeout_secs,
            starts=payload.starts,
        )
    elif isinstance(payload, ExceptionRaised):
        head.update(record="exception", step=payload.step, error=f"{type(payload.error).__name__}: {payload.error}")
    else:
        raise TypeError(f"not a bus payload: {payload!r}")
    return {**head, **fields}


def event_log_line(payload: Payload | str, **fields: Any) -> str:
    """One event-log line (JSON and a newline) for a bus payload, or a record of kind ``payload``.

    Args:
        payload: An :class:`Event` (``after_run`` becomes a ``step`` record, ``system`` a
            ``system`` record; ``begin``,
            ``session_created`` and ``end`` keep their signal's name), a
            :class:`CheckpointSaved`, :class:`StopRequest`, :class:`SubscriberError`,
            :class:`ExceptionRaised` or :class:`WaitForStep`; or a record kind (``"status"``, ``"close"``) given with
            all its ``fields`` (``close``: ``step``, ``wall_time``, ``ended``).
        **fields: More fields for the record (``begin``: keys, shapes, ...; ``wall_time`` for
            payloads that have none).
    """
    return encode_record(_record(payload, fields))


def event_log_record(payload: Payload | str, **fields: Any) -> dict[str, Any]:
    """The record :func:`event_log_line` writes, as a ``dict`` (what a reader decodes the line to);
    :func:`encode_record` makes it the line."""
    return _record(payload, fields)


def encode_record(record: Mapping[str, Any]) -> str:
    """One event-log line for a record made by :func:`event_log_record`."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def _decoded(record: dict[str, Any]) -> dict[str, Any]:
    kind = record.get("record")
    if kind == "system":  # its samples gathered under "values", as a step's values are
        out = {k: v for k, v in record.items() if not k.startswith(SYSTEM_PREFIX)}
        out["values"] = {k: v for k, v in record.items() if k.startswith(SYSTEM_PREFIX)}
        return out
    if kind != "step":
        return record
    values = {k: v for k, v in record.items() if k not in STEP_FIELDS}
    values.update(record.get("values", {}))
    out = {k: v for k, v in record.items() if k in STEP_FIELDS}
    out["values"] = values
    return out


def decode_line(line: str, where: str = "the event log") -> dict[str, Any]:
    """A complete line as a record (step values gathered under ``values``); ValueError if it is not one."""
    try:
        record = json.loads(line)
    except ValueError as error:
        raise ValueError(f"{where} is not an event log record ({error}): {line[:80]!r}") from None
    if not isinstance(record, dict) or not isinstance(record.get("v"), int) or "record" not in record:
        raise ValueError(f"{where} is not an event log record (no 'v' and 'record' fields): {line[:80]!r}")
    if record["v"] > EVENT_LOG_VERSION:
        raise ValueError(
            f"{where} has format version {record['v']}; this hookbus reads up to {EVENT_LOG_VERSION}: upgrade hookbus"
        )
    return _decoded(record)


def read_event_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of an event log written by ``EventLogSink``, in order; safe while it is written.

    A last line without its newline (being written, or torn by a kill) is not data and is left
    out. Step and system records have their values gathered in a ``values`` dict (NaN and infinities as
    floats); every other field is as written (see docs/guides/watching-and-replay.md "Record and replay").

    Raises:
        ValueError: naming the line, when a complete line is not a record, or when the log was
            written in a newer format.
    """
    return list(iter_event_log(path))


def _complete_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """Each complete line of the log without its newline, with its number (from 1)."""
    with open(path, encoding="utf-8", newline="\n") as handle:
        for n, line in enumerate(handle, 1):
            if not line.endswith("\n"):
                return  # the piece after the last newline is not a complete line
            yield n, line[:-1]


def _all_valid(records: list[Any]) -> bool:
    """Whether every record is a dict with an int format version this reader knows and a
    ``record`` field (what :func:`decode_line` checks), by columns (a call per record costs as
    much as decoding it)."""
    if not records:
        return True
    if set(map(type, records)) != {dict}:
        return False
    versions: set[Any] = set(map(dict.get, records, repeat("v")))
    return (
        set(map(type, versions)) == {int}
        and max(versions) <= EVENT_LOG_VERSION
        and all(map(dict.__contains__, records, repeat("record")))
    )


def parsed(lines: Sequence[str], first: int, where: str) -> list[dict[str, Any]]:
    """``lines`` (complete lines, the first numbered ``first``) as records, as written (a step's
    values at the top level). Raises ValueError naming the first line that is not a record."""
    try:
        records = json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        records = None
    if not isinstance(records, list) or len(records) != len(lines) or not _all_valid(records):
        for number, line in enumerate(lines, first):  # the contract's own reader names the line
            decode_line(line, f"{where} line {number}")
        raise ValueError(f"{where} lines {first}-{first + len(lines) - 1} are not event log records")
    return records


#: Lines decoded in one call of the JSON decoder (as one array: half a call a line's cost).
_CHUNK = 1000


def iter_event_log(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """:func:`read_event_log`'s records one at a time, the file read as they are taken: memory
    flat in the log's length (a replay of a long run)."""
    where = os.fspath(path)
    chunk: list[str] = []
    first = 1
    for n, line in _complete_lines(path):
        if not chunk:
            first = n
        chunk.append(line)
        if len(chunk) == _CHUNK:
            yield from map(_decoded, parsed(chunk, first, where))
            chunk = []
    yield from map(_decoded, parsed(chunk, first, where))


# A JSON literal as json.dumps writes one outside a string: a number, NaN, an infinity, true, false, null.
_LITERAL = r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|NaN|-?Infinity|true|false|null"
_LITERALS = re.compile(_LITERAL)
_STRING = re.compile(r'("[^"\\]*")')  # a JSON string without escapes
#: At most this many step-line templates are kept (a log's step lines come in a handful of shapes).
_MAX_TEMPLATES = 64


def _template(line: str) -> re.Pattern[str]:
    """What matches exactly the lines that differ from ``line`` (a line without escapes) only in the
    literals outside its strings: every key and string value the same, the format version too."""
    pattern: list[str] = []
    previous = ""
    for index, part in enumerate(_STRING.split(line)):
        if index % 2:  # a string: a key or a string value, matched as written
            pattern.append(re.escape(part))
            previous = part
            continue
        position = 0
        for literal in _LITERALS.finditer(part):
            version = previous == '"v"' and position == 0  # the format version stays what it is here
            pattern.append(re.escape(part[position : literal.start()]))
            pattern.append(re.escape(literal.group()) if version else f"(?:{_LITERAL})")
            position = literal.end()
        pattern.append(re.escape(part[position:]))
    return re.compile("".join(pattern))


def iter_event_log_shapes(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The log's records as :func:`iter_event_log` gives them, but for the step records whose line
    differs from a step line given before only in its numbers (and ``true`` / ``false`` / ``null``):
    what declares the log's keys and modes, read at about a sixth of a whole decode's cost (a
    replay's first pass). Each line skipped matched a decoded line's template whole, so it is a
    valid record of the same keys; every other line is decoded, a bad one raising as there."""
    where = os.fspath(path)
    templates: list[re.Pattern[str]] = []
    last: re.Pattern[str] | None = None
    for n, line in _complete_lines(path):
        if last is not None and last.fullmatch(line):
            continue
        matched = next((t for t in templates if t.fullmatch(line)), None)
        if matched is not None:
            last = matched
            continue
        record = decode_line(line, f"{where} line {n}")
        if record["record"] == "step" and "\\" not in line and len(templates) < _MAX_TEMPLATES:
            last = _template(line)
            templates.append(last)
        yield record
