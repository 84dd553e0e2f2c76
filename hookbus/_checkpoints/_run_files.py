"""Run files in the shared checkpoint directory: how an evaluator and training talk without a cluster.

In TensorFlow's estimator layout the ``evaluator`` task is not a cluster member: it evaluates
the checkpoints training leaves in a shared directory. Two small files beside them carry what
must cross that gap, each written atomically (temporary file, then rename):

- ``stop.hookbus.json``, written by the evaluator when a subscriber there (early stopping on
  ``eval/`` values) asks to stop: ``{"reason", "step", "wall_time"}``. Training's chief (or the
  single training process) reads it at most once a second and stops the whole run.
- ``ended.hookbus.json``, written by training when its run closes: ``{"step", "wall_time"}``.
  The evaluator evaluates the checkpoint training ended with, then ends too.

A file older than the reader's own start is left over from an earlier run and ignored;
training removes such leftovers when its run begins. Times are wall-clock (``time.time``), so
machines sharing the directory need clocks that agree to within a second or so.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from hookbus._rules._files import write_atomically

__all__ = ["ENDED", "POLL_SECS", "STOP", "EvaluatorLink", "RunFiles"]

STOP = "stop.hookbus.json"
ENDED = "ended.hookbus.json"


class RunFiles:
    """The run files of checkpoint directory ``directory``."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _read(self, name: str, since: float) -> dict[str, Any] | None:
        try:
            with open(self._path(name), encoding="utf-8") as file:
                data = json.load(file)
        except (FileNotFoundError, ValueError):  # none yet (a reader never sees half a file)
            return None
        if not isinstance(data, dict) or not isinstance(data.get("wall_time"), int | float):
            return None
        return data if data["wall_time"] >= since else None

    def _write(self, name: str, data: dict[str, Any]) -> None:
        os.makedirs(self.directory, exist_ok=True)
        write_atomically(self._path(name), json.dumps(data))

    def clear_before(self, since: float) -> None:
        """Remove run files written before ``since`` (training calls it as its run begins)."""
        for name in (STOP, ENDED):
            # Older than ``since``, torn or foreign: nothing this run may act on.
            if os.path.exists(self._path(name)) and self._read(name, since) is None:
                with contextlib.suppress(FileNotFoundError):  # another process removed it first
                    os.remove(self._path(name))

    def request_stop(self, reason: str, step: int, wall_time: float) -> None:
        """The evaluator asks training to stop (the first request is kept)."""
        if not os.path.exists(self._path(STOP)):
            self._write(STOP, {"reason": reason, "step": step, "wall_time": wall_time})

    def stop_requested(self, since: float) -> tuple[str, int] | None:
        """``(reason, step)`` of a stop requested at or after ``since``, or ``None``."""
        data = self._read(STOP, since)
        if data is None:
            return None
        return str(data.get("reason", "the evaluator asked to stop")), int(data.get("step", 0))

    def mark_ended(self, step: int, wall_time: float) -> None:
        """Training's run is over at ``step`` (its last checkpoint is on disk)."""
        self._write(ENDED, {"step": step, "wall_time": wall_time})

    def ended(self, since: float) -> int | None:
        """The step training ended at, if it ended at or after ``since``."""
        data = self._read(ENDED, since)
        return None if data is None else int(data.get("step", 0))


#: How often training reads an evaluator's stop request, in seconds of the bus's clock.
POLL_SECS = 1.0


class EvaluatorLink:
    """Training's side of the run files: stop when an evaluator asks; say when the run ended.

    Owned by the bus for one run, on the process that saves checkpoints (the chief, or the only
    training process). :meth:`poll` runs on the training thread at every step and reads the
    directory at most once per ``every_secs`` (default 1 s) of the bus's clock.
    """

    def __init__(self, files: RunFiles, since: float, every_secs: float = POLL_SECS) -> None:
        self.files = files
        self.since = since
        self.every_secs = every_secs
        self._next = -1.0
        self._seen = False
        files.clear_before(since)

    def poll(self, now: float) -> tuple[str, int] | None:
        """An evaluator's new stop request, ``(reason, step)``, once; else ``None``."""
        if now < self._next or self._seen:
            return None
        self._next = now + self.every_secs
        found = self.files.stop_requested(self.since)
        self._seen = found is not None
        return found
