"""The file of :class:`~hookbus.sinks.EventLogSink`: whole lines, and a session's cut.

Touched only on the sink's writer thread. Lines are written whole, in chunks of complete lines,
so a reader never sees half a record except as an unterminated last line. A session start cuts
the file back to its resume point; a cut writes a new file (atomically, a new inode) so that a
follower notices. Written with hookbus's public API only, like the sink.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from hookbus.sink_api import write_atomically

__all__ = ["LogFile"]

_CHUNK = 1 << 16  # pending bytes written at once, whole lines only


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
    """The log file, touched only on the writer's thread. Lines are written whole, in chunks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: io.RawIOBase | None = None
        self.size = 0  # bytes of the file, all complete lines: what a state_dict points at
        self.pending: list[bytes] = []
        self.pending_bytes = 0

    def add(self, line: str) -> None:
        data = line.encode("utf-8")
        self.pending.append(data)
        self.pending_bytes += len(data)
        if self.handle is not None and self.pending_bytes >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.handle is None or not self.pending:
            return  # before the first session, records wait: the session decides where they go
        data = memoryview(b"".join(self.pending))
        self.pending, self.pending_bytes = [], 0
        self.size += len(data)
        while data:
            written = self.handle.write(data)
            data = data[written or 0 :]

    def start_session(self, how: str, step: int, offset: int | None) -> None:
        """Cut the file to a session's resume point, then append (the records before this run's
        first session, its ``begin``, follow the cut). A cut writes a new file (a new inode)."""
        if self.handle is not None:
            self.flush()  # everything so far is in the file, so the cut covers it too
            self.handle.close()
            self.handle = None
        preamble, self.pending, self.pending_bytes = b"".join(self.pending), [], 0
        try:
            old = self.path.read_bytes()
        except FileNotFoundError:
            old = b""
        kept = _cut(old, how, step, offset)
        self.size = len(kept)
        if kept != old or not self.path.exists():
            write_atomically(self.path, (kept + preamble).decode("utf-8"))
            self.size, preamble = len(kept) + len(preamble), b""
        self.handle = open(self.path, "ab", buffering=0)  # noqa: SIM115 - open until close
        if preamble:
            self.pending, self.pending_bytes = [preamble], len(preamble)
            self.flush()

    def close(self) -> None:
        if self.handle is None and self.pending:
            self.start_session("append", 0, None)  # a run without a session: keep what it recorded
        self.flush()
        if self.handle is not None:
            self.handle.close()
            self.handle = None
