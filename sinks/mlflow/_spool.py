"""The MLflow sink's own files in its ``directory``: the spool its points wait in, and its run's id.

Per run key (so that ``runs_on="each"`` workers sharing a directory never collide), with
``<stem>`` = ``mlflow-<run key>`` (a digest of it where it holds other characters than
``[\\w.-]``):

- ``<stem>.spool-<n>.jsonl``: the spool, JSON lines, one record each: ``{"open": ...}`` where a
  training starts or continues its run, ``{"point": [mode, step, ms, values, tags]}``,
  ``{"model": {"step", "path", "kind"}}`` for an export staged to ship as the artifact ``model``
  (``log_model=True``), ``{"end": ...}`` with how the run ended. The background writer appends (and flushes to the OS
  at the checkpoint barrier, like any local writer); the shipper reads complete lines only.
  Each process writes segments of its own (``n`` grows; a kill's torn last line stays in the
  killed process's segment, where it is skipped), and starts a new one past 1 MiB.
- ``<stem>.run.json``: what the shipper has done, written atomically: the training and its
  MLflow run id (from the moment the run is created), how it ended, the last step of each mode
  MLflow holds and the time of the last record shipped, and the spool position up to which
  everything has shipped.
- ``<stem>.model-<step>-<id>/``: an export staged to ship (hard links to the export's files where
  the filesystem allows, else a copy: the export directory may delete it meanwhile), deleted once
  shipped. Each staging has a directory of its own, so a step exported again after a resume never
  rewrites one the shipper may be uploading.
- ``.<stem>.lock``: the lock (``hookbus.sink_api.OutputLock``): two trainings on one directory at once
  fail before step 1, naming the holder.

Bounded on disk: a segment whose every record has shipped is deleted once a later one exists,
and every segment once the run's end has shipped; the id file stays (what the next start ships
of a killed training goes to that training's run).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hookbus.sink_api import DEAD, TRACKER_STATUS, OutputLock, write_atomically

from ._run import MODES, SYSTEM, Point, RunPlan

__all__ = ["Cursor", "Opening", "Spool", "SpoolWriter"]

SEGMENT_BYTES = 1 << 20  # a new segment past this: what has shipped can be deleted
_STEM = re.compile(r"^[\w.\-]{1,64}$")
_SEGMENT = re.compile(r"\.spool-(\d{6,})\.jsonl$")
_STAGED = re.compile(r"\d+-[0-9a-f]{12}")  # a staged export's name after its prefix: step, id
#: (segment number, byte offset): the next byte to read.
Cursor = tuple[int, int]


def file_stem(run_key: str) -> str:
    """The files' common name for ``run_key``: ``mlflow-<run key>``, or its digest where it has ``/`` or ``:``."""
    if _STEM.match(run_key):
        return f"mlflow-{run_key}"
    return "mlflow-" + hashlib.sha256(run_key.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Opening:
    """A training starting (or continuing) its run: the spool's ``open`` record."""

    training: str  # the training's own id (tag hookbus.training), made when it starts afresh
    new: bool  # a new MLflow run (the previous training in this directory ended)
    run_id: str | None  # the restored checkpoint's run
    start_ms: int | None
    by_run_key: bool = False  # continue_ended: an ended run of the run key too (replay uploads)
    run_name: str | None = None  # the run's name, params and tags as this training gave them
    params: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    texts: Mapping[str, str] = field(default_factory=dict)  # artifact file name to its text

    def record(self) -> dict[str, Any]:
        fields = {**dataclasses.asdict(self), "params": dict(self.params), "tags": dict(self.tags)}
        return {"open": {**fields, "texts": dict(self.texts)}}

    @staticmethod
    def of(record: Mapping[str, Any]) -> Opening:
        fields = record["open"]
        return Opening(
            str(fields["training"]), bool(fields["new"]), fields.get("run_id"), fields.get("start_ms"),
            bool(fields.get("by_run_key", False)), fields.get("run_name"), dict(fields.get("params", {})),
            dict(fields.get("tags", {})), dict(fields.get("texts", {})),
        )  # fmt: skip


def point_record(point: Point) -> dict[str, Any]:
    fields = [point.mode, point.step, point.timestamp_ms, point.values, point.tags]
    return {"point": fields if point.logged_step is None else [*fields, point.logged_step]}


def point_of(record: Mapping[str, Any]) -> Point:
    mode, step, stamp, values, tags, *logged = record["point"]  # logged: the MLflow step, where it differs
    return Point(
        str(mode), int(step), int(stamp), {str(k): float(v) for k, v in values.items()}, dict(tags),
        int(logged[0]) if logged else None,
    )  # fmt: skip


class Spool:
    """The sink's files for one run key in ``directory`` (see the module docstring).

    Args:
        directory: The sink's directory.
        run_key: The run's identity.
        owner: The sink's name, for messages.
    """

    def __init__(self, directory: Path, run_key: str, owner: str) -> None:
        self.directory = directory
        self.stem = file_stem(run_key)
        self.run_key = run_key
        self.record_path = directory / f"{self.stem}.run.json"
        self.lock = OutputLock(
            directory / self.stem, owner, "its MLflow spool and run id", path=str(directory / f".{self.stem}.lock")
        )
        self._record_lock = threading.Lock()
        self.skipped = 0  # torn or unreadable lines skipped (a kill inside a write)

    # -- the id file --------------------------------------------------------------------------
    def read_record(self) -> dict[str, Any]:
        """The id file's fields (``{}`` when there is none or it is unreadable)."""
        try:
            data = json.loads(self.record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write_record(self, **fields: Any) -> None:
        """Update the id file atomically with ``fields`` (the shipper's thread)."""
        with self._record_lock:
            record = {**self.read_record(), "run_key": self.run_key, **fields}
            write_atomically(self.record_path, json.dumps(record, sort_keys=True) + "\n")

    # -- the segments -------------------------------------------------------------------------
    def segments(self) -> list[tuple[int, Path]]:
        """The spool's segments, oldest first."""
        found = []
        for path in self.directory.glob(f"{self.stem}.spool-*.jsonl"):
            match = _SEGMENT.search(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def segment_path(self, number: int) -> Path:
        return self.directory / f"{self.stem}.spool-{number:06d}.jsonl"

    def read(self, cursor: Cursor | None, limit: int = 2000) -> Iterator[tuple[dict[str, Any], Cursor]]:
        """The complete records after ``cursor`` (at most ``limit``), each with the cursor past it.

        A segment followed by a later one is complete: a torn last line there (a kill inside a
        write) is skipped; the newest segment's last line may still be being written, and waits.
        """
        segments = self.segments()
        start_segment, start_offset = cursor if cursor is not None else (-1, 0)
        count = 0
        for index, (number, path) in enumerate(segments):
            if number < start_segment:
                continue
            offset = start_offset if number == start_segment else 0
            last = index == len(segments) - 1
            try:
                with path.open("rb") as file:
                    file.seek(offset)
                    data = file.read()
            except FileNotFoundError:
                continue  # deleted meanwhile (shipped)
            end = data.rfind(b"\n") + 1
            if not last and end < len(data):
                self.skipped += 1
            position = offset
            for line in data[:end].splitlines(keepends=True):
                position += len(line)
                try:
                    record = json.loads(line)
                except ValueError:
                    self.skipped += 1
                    continue
                if isinstance(record, dict):
                    yield record, (number, position)
                    count += 1
                    if count >= limit:
                        return
            if not last:
                yield {}, (segments[index + 1][0], 0)  # past a complete segment: nothing to ship

    def remove_before(self, number: int) -> None:
        """Delete the segments older than ``number`` (every record in them has shipped)."""
        for older, path in self.segments():
            if older < number:
                path.unlink(missing_ok=True)

    def model_path(self, step: int) -> Path:
        """A new directory to stage the export of ``step`` in, to ship."""
        return self.directory / f"{self.stem}.model-{step}-{uuid.uuid4().hex[:12]}"

    def staged_models(self) -> list[Path]:
        """The exports staged to ship (``log_model=True``)."""
        prefix = f"{self.stem}.model-"
        return [p for p in self.directory.glob(f"{prefix}*") if _STAGED.fullmatch(p.name[len(prefix) :])]

    def remove_all(self) -> None:
        """Delete every segment (the run ended and everything shipped)."""
        for _, path in self.segments():
            path.unlink(missing_ok=True)


class SpoolWriter:
    """The background writer's side: appends records to a segment of this process's own.

    Args:
        spool: The files.
    """

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        existing = spool.segments()
        self._number = existing[-1][0] + 1 if existing else 0
        self._file: IO[str] | None = None
        self._size = 0
        #: The last step of each mode in the spool for this training (a re-run step is dropped).
        self.spooled: dict[str, int] = dict.fromkeys(MODES, -1)
        self.points = 0  # points written to the spool by this process
        self.backlog = 0  # points of earlier processes waiting when this one started

    def start(
        self, plan: RunPlan, state: Mapping[str, Any] | None, start_ms: int | None, continue_ended: bool
    ) -> Opening:
        """At the first session: which run this training continues, from the restored state and
        what the spool holds; its ``open`` record is written first.

        A run is continued only by a training that restored it (a checkpoint whose state names it),
        or with ``continue_ended``; a fresh start is a new run, whatever it shares with the
        directory's last training. That training, where it never ended (a SIGKILL, an OOM kill),
        gets its ``end`` first: what it spooled ships to its own run, which ends KILLED
        (``hookbus.end``: presumed dead) at its last spooled point's time.
        """
        record = self.spool.read_record()
        cursor = record.get("cursor")
        latest: str | None = record.get("training") if isinstance(record.get("training"), str) else None
        ended = bool(record.get("ended"))
        steps: dict[str, dict[str, int]] = {}  # training -> last step of each mode in the spool
        staged: set[str] = set()  # exports the spool's records still name
        # The latest training's last record's time (what shipped of it; the spool's records below add theirs).
        last_ms = record.get("last_ms") if isinstance(record.get("last_ms"), int) else None
        floors = record.get("shipped") if isinstance(record.get("shipped"), dict) else {}
        if latest is not None and isinstance(floors, dict):
            steps[latest] = {m: int(floors.get(m, -1)) for m in MODES}
        for entry, _ in self.spool.read(tuple(cursor) if isinstance(cursor, list) else None, limit=10**9):
            if "open" in entry:
                opening = Opening.of(entry)
                latest, ended, last_ms = opening.training, False, opening.start_ms
                if opening.new:
                    steps[latest] = dict.fromkeys(MODES, -1)
                steps.setdefault(latest, dict.fromkeys(MODES, -1))
            elif "point" in entry and latest is not None:
                point = point_of(entry)
                mine = steps.setdefault(latest, dict.fromkeys(MODES, -1))
                mine[point.mode] = max(mine.get(point.mode, -1), point.step)
                last_ms = point.timestamp_ms
                self.backlog += 1
            elif "model" in entry:
                staged.add(str(entry["model"].get("path")))
            elif "end" in entry:
                ended = True
        for path in self.spool.staged_models():
            if str(path) not in staged:
                shutil.rmtree(path, ignore_errors=True)  # staged by a killed process, its record never written
        saved = state or {}
        run_id = saved.get("run_id") if isinstance(saved.get("run_id"), str) else None
        training = saved.get("training") if isinstance(saved.get("training"), str) else None
        if plan.existing_run is not None:  # the user's run: the given one, whatever the checkpoint's was
            if run_id is not None and run_id != plan.existing_run:
                training, saved = None, {}  # another run: it holds none of this training's points
            run_id = plan.existing_run
        if training is not None:  # a restored checkpoint's training
            who, new, by_run_key = training, False, False
        elif plan.existing_run is None and run_id is not None:  # a restored checkpoint's run
            who, new, by_run_key = training or latest or uuid.uuid4().hex, False, False
        elif continue_ended:
            who, new, by_run_key = latest or uuid.uuid4().hex, False, True
        else:  # restores nothing: another training (a kill before the first checkpoint included)
            who, new, by_run_key = uuid.uuid4().hex, True, False
        if latest is not None and not ended and who != latest:
            final = max((s for m, s in steps.get(latest, {}).items() if m != SYSTEM), default=-1)
            tags = {"hookbus.end": DEAD, "hookbus.final_step": str(max(final, 0))}
            when = last_ms if last_ms is not None else start_ms
            self.end(TRACKER_STATUS[DEAD], tags, when if when is not None else int(time.time() * 1000))
        opening = Opening(who, new, run_id, start_ms, by_run_key, plan.run_name, plan.params, plan.tags, plan.texts)
        if not opening.new:
            self.spooled.update(steps.get(opening.training, {}))
        shipped = saved.get("shipped")
        if isinstance(shipped, Mapping):
            for mode in MODES:
                value = shipped.get(mode)
                if isinstance(value, int) and not isinstance(value, bool):
                    self.spooled[mode] = max(self.spooled[mode], value)
        self._append(opening.record())
        return opening

    def add(self, point: Point) -> bool:
        """Append one point; False (dropped) where the spool already holds its step of its mode."""
        if point.step <= self.spooled[point.mode]:
            return False
        self.spooled[point.mode] = point.step
        self._append(point_record(point))
        self.points += 1
        return True

    def add_sample(self, timestamp_ms: int, values: dict[str, float]) -> Point:
        """Append one sample of the machine as the run's next ``system`` point: its step is the
        sample's number, one past the last this run's spool or its store holds (a resume goes on
        counting; a sample is never a re-run of an earlier one, so none is dropped)."""
        point = Point(SYSTEM, self.spooled[SYSTEM] + 1, timestamp_ms, values)
        self.add(point)
        return point

    def add_model(self, step: int, source: str, kind: str) -> bool:
        """Stage the export at ``source`` (a file or a SavedModel directory) to ship as the artifact
        ``model``, and append its record; False where ``source`` is gone already."""
        staged = self.spool.model_path(step)
        try:
            if os.path.isdir(source):
                shutil.copytree(source, staged, copy_function=_link_or_copy)
            else:
                staged.mkdir()
                _link_or_copy(source, str(staged / f"model{os.path.splitext(source)[1]}"))
        except FileNotFoundError:
            shutil.rmtree(staged, ignore_errors=True)
            return False
        self._append({"model": {"step": step, "path": str(staged), "kind": kind}})
        return True

    def end(self, status: str, tags: Mapping[str, str], end_ms: int) -> None:
        """Append how the run ended (its MLflow status, the tags that say so, its end time)."""
        self._append({"end": {"status": status, "tags": dict(tags), "time": end_ms}})

    def _append(self, record: Mapping[str, Any]) -> None:
        if self._file is not None and self._size >= SEGMENT_BYTES:
            self._file.close()
            self._file, self._number = None, self._number + 1
        if self._file is None:
            self._file = self.spool.segment_path(self._number).open("a", encoding="utf-8")
            self._size = 0
        line = json.dumps(record, separators=(",", ":")) + "\n"
        self._file.write(line)
        self._size += len(line)

    def flush(self) -> None:
        """Hand what was written to the OS (the writer's flush; the checkpoint barrier's)."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            file.close()  # no fsync, as every local writer (as durable as TensorFlow's own checkpoints)


def _link_or_copy(source: str, target: str) -> None:
    """A hard link (instant, no second copy of a large model), else a copy (another filesystem)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
