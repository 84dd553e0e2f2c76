"""Following an event log as it grows: stat polling, whole lines only, a replaced file read anew.

``hookbus watch`` polls; it never relies on inotify, which hears nothing of writes made by another
NFS or CIFS client. Each poll opens the path and reads what was added since the last one. A last
line without its newline (a write in progress, or one a kill tore) is not data: it waits for its
newline. The file's identity (device and inode) changing — a resume's cut replaces the log
atomically — or the file getting shorter than what was read (a copy-truncate tool), or the byte
before the read position no longer being a line's end (truncated and written again between two
polls), all mean "read again from the start". A poll reads at most ``max_bytes`` (and says
whether more is there), so a huge log is taken in pieces that each are let go before the next.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

__all__ = ["LogFollower", "Poll"]

_READ = 1 << 20  # bytes read per call
#: Bytes one poll reads at most (a little more: up to the end of the last line begun).
POLL_BYTES = 2 << 20


@dataclass(frozen=True)
class Poll:
    """What one poll of a log found.

    Attributes:
        exists: Whether the path names a file now.
        reset: Whether everything read before is void (the file was replaced, shrank or was
            rewritten): ``lines`` then start from the file's beginning.
        lines: The complete lines added since the last poll (without their newlines).
        mtime: The file's modification time (``None`` when it does not exist).
        more: Whether the file held more than this poll read (poll again for the rest).
    """

    exists: bool
    reset: bool = False
    lines: list[str] = field(default_factory=list)
    mtime: float | None = None
    more: bool = False


class LogFollower:
    """Reads one log file's complete lines as they are written, across replacements.

    Args:
        path: The log; it need not exist yet.
        max_bytes: Bytes one poll reads at most (default :data:`POLL_BYTES`).
    """

    def __init__(self, path: str | os.PathLike[str], max_bytes: int = POLL_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file being read
        self._offset = 0  # bytes consumed: every complete line before it
        self._tail = b""  # bytes after the last newline read (not data yet)

    def poll(self) -> Poll:
        """Read what the file gained since the last poll (see :class:`Poll`)."""
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - closed below; fstat needs the open file
        except (FileNotFoundError, IsADirectoryError):  # not there yet, or PATH became a directory of logs
            return Poll(exists=False)
        with handle:
            stat = os.fstat(handle.fileno())  # the file opened, not whatever the path names a moment later
            identity = (stat.st_dev, stat.st_ino)
            reset = self._identity is not None and (
                identity != self._identity or stat.st_size < self._offset + len(self._tail) or not self._intact(handle)
            )
            if reset or self._identity is None:
                self._offset, self._tail = 0, b""
            self._identity = identity
            handle.seek(self._offset + len(self._tail))
            chunks = [self._tail]
            size = len(self._tail)
            more = False
            while chunk := handle.read(_READ):
                chunks.append(chunk)
                size += len(chunk)
                if size >= self.max_bytes and b"\n" in chunk:
                    more = True  # perhaps: the next poll finds out
                    break
        data = b"".join(chunks)  # joined once: adding each piece to the last copies the log again each time
        end = data.rfind(b"\n") + 1
        self._offset += end
        self._tail = data[end:]
        lines = data[:end].decode("utf-8", errors="replace").split("\n")[:-1]
        return Poll(exists=True, reset=reset, lines=lines, mtime=stat.st_mtime, more=more)

    def _intact(self, handle: BinaryIO) -> bool:
        """Whether the byte before the read position is still the newline read there."""
        if self._offset == 0:
            return True
        handle.seek(self._offset - 1)
        return handle.read(1) == b"\n"
