"""The file of :class:`~hookbus.sinks.EventLogSink`: whole lines, a session's cut, and the summary.

Touched only on the sink's writer thread. Lines are written whole, in chunks of complete lines,
so a reader never sees half a record except as an unterminated last line. A session start cuts
the file back to its resume point; a cut writes a new file (atomically, a new inode) so that a
follower notices. Every record written is folded into the run's summary, which each flush of
the log (not a chunk's write) replaces beside it, atomically, with the length and inode of the
log it covers (:class:`hookbus.sink_api.RunSummary`). Written with hookbus's public API only,
like the sink.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hookbus.sink_api import RunSummary, encode_record, read_run_summary, run_summary_path, write_atomically

__all__ = ["LogFile"]

_CHUNK = 1 << 16  # pending bytes written at once, whole lines only
_TAIL = 64  # the end of the log kept to give the summary (it keeps the last 48 bytes it covers)


def _step_of(line: bytes) -> int:
    step = json.loads(line).get("step")
    return step if isinstance(step, int) else -1


def _cut(old: bytes, how: str, step: int, offset: int | None) -> bytes:
    """What of the file ``old`` a session starting at ``step`` keeps (see :meth:`LogFile.start_session`)."""
    complete = old[: old.rfind(b"\n") + 1]  # a last line without its newline was torn by a kill
    if how == "new":
        return b""
    whole = offset is not None and offset <= len(complete) and complete[offset - 1 : offset] in (b"\n", b"")
    if how == "offset" and whole:
        kept, tail = complete[:offset], complete[offset:].splitlines(keepends=True)
        # The checkpoint restored from became visible after the states were taken: keep its record.
        for line in tail:
            record = json.loads(line)
            if record.get("record") != "checkpoint_saved" or record.get("step") != step:
                break
            kept += line
        return kept
    if how in ("step", "offset"):  # no state to go by: keep the records up to the first after step
        end = 0
        for line in complete.splitlines(keepends=True):
            if _step_of(line) > step:
                break
            end += len(line)
        return complete[:end]
    return complete


class LogFile:
    """The log file and its summary, touched only on the writer's thread. Lines are written whole, in chunks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.summary_path = run_summary_path(path)
        self.handle: io.RawIOBase | None = None
        self.size = 0  # bytes of the file, all complete lines: what a state_dict points at
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.summary = RunSummary()  # the fold of every record in the file and pending
        self.tail = b""  # the file's last bytes
        self.summarized = -1  # the size the summary on disk covers (-1: none written by this run)
        #: The summary as of the last flush, with the size it covers: a checkpoint's state takes it.
        self.flushed: tuple[int, dict[str, Any]] | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        self.summary.add(record)
        data = encode_record(record).encode("utf-8")
        self.pending.append(data)
        self.pending_bytes += len(data)
        if self.handle is not None and self.pending_bytes >= _CHUNK:
            self._write_pending()

    def _write_pending(self) -> None:
        if self.handle is None or not self.pending:
            return  # before the first session, records wait: the session decides where they go
        data = memoryview(b"".join(self.pending))
        self.pending, self.pending_bytes = [], 0
        self.size += len(data)
        self.tail = (self.tail + data[-_TAIL:].tobytes())[-_TAIL:]
        while data:
            written = self.handle.write(data)
            data = data[written or 0 :]

    def flush(self) -> None:
        """Write what is pending, then the summary of the whole file beside it (when it changed)."""
        self._write_pending()
        if self.handle is None or self.summarized == self.size:
            return
        summary = self.summary
        write_atomically(
            self.summary_path, summary.to_json(self.size, os.fstat(self.handle.fileno()).st_ino, self.tail)
        )
        self.summarized = self.size
        self.flushed = (self.size, summary.as_dict())

    def start_session(self, how: str, step: int, offset: int | None, summary: Mapping[str, Any] | None = None) -> None:
        """Cut the file to a session's resume point, then append (the records before this run's
        first session, its ``begin``, follow the cut). A cut writes a new file (a new inode).
        ``summary``: the summary as of ``offset`` (a checkpoint's state), which spares reading
        the records kept before it."""
        if self.handle is not None:
            self._write_pending()  # everything so far is in the file, so the cut covers it too
            self.handle.close()
            self.handle = None
        preamble, self.pending, self.pending_bytes = b"".join(self.pending), [], 0
        try:
            old = self.path.read_bytes()
        except FileNotFoundError:
            old = b""
        kept = _cut(old, how, step, offset)
        self.summary = self._summary_of(kept, old, how, offset, summary)
        self.summary.add_lines(preamble)
        self.size = len(kept)
        if kept != old or not self.path.exists():
            write_atomically(self.path, (kept + preamble).decode("utf-8"))
            self.size, preamble = len(kept) + len(preamble), b""
            self.tail = (kept + preamble)[-_TAIL:]
        else:
            self.tail = kept[-_TAIL:]
        self.summarized = -1
        self.handle = open(self.path, "ab", buffering=0)  # noqa: SIM115 - open until close
        if preamble:
            self.pending, self.pending_bytes = [preamble], len(preamble)
        self.flush()

    def _summary_of(
        self, kept: bytes, old: bytes, how: str, offset: int | None, stored: Mapping[str, Any] | None
    ) -> RunSummary:
        """The fold of the records ``kept`` of the file ``old``: from a checkpoint's summary and the
        records after its offset, from the summary on disk where nothing was cut, else by reading them."""
        if how == "offset" and stored is not None and offset is not None and offset <= len(kept):
            summary = RunSummary.from_dict(stored)
            summary.add_lines(kept[offset:])
            return summary
        if kept and kept == old[: len(kept)] and len(kept) == len(old[: old.rfind(b"\n") + 1]):
            try:
                return read_run_summary(self.path)  # the file kept whole: its summary, and what followed it
            except OSError:
                pass
        return RunSummary.of_lines(kept)

    def close(self) -> None:
        if self.handle is None and self.pending:
            self.start_session("append", 0, None)  # a run without a session: keep what it recorded
        self.flush()
        if self.handle is not None:
            self.handle.close()
            self.handle = None
