"""One writer per output file: an advisory lock on a hidden file beside it, naming its holder.

Two runs appending to one CSV, or writing event files into one TensorBoard run, or saving into
one checkpoint directory, would interleave or erase each other's output and both exit 0. A sink
takes an :class:`OutputLock` before step 1 and keeps it until it closes; a second holder fails at
once with :class:`OutputInUseError`, which names the path and the holder (pid, host, since when).

The lock is ``fcntl.flock`` on ``.<name>.lock`` beside the output (``.metrics.csv.lock``,
``.events.lock`` in a TensorBoard run's directory, ``.checkpoint.lock`` beside the checkpoint
pointer): not the output itself, which atomic rewrites replace by a new file. The kernel releases
it when the holder closes it or dies (a kill, an OOM), so a stale lock cannot outlive its process;
the lock file stays (removing it would let a third process lock a new file while a second still
holds the old one). One lock per file, not per directory: an evaluator writing ``logdir/eval``
beside training's ``logdir`` holds a different lock.

Locks are advisory and per open file: two sinks of one process on one file conflict too (as they
should). On network filesystems ``flock`` may be local to one machine (older NFS clients) or
emulated with POSIX locks (NFSv4 on Linux), and some filesystems do not support it at all; the
lock then protects against a second run on the same machine only, and where ``flock`` is not
supported no lock is taken (nothing fails because of it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time

try:
    import fcntl
except ImportError:  # not POSIX: no advisory locks; outputs are not protected
    fcntl = None  # type: ignore[assignment]

__all__ = ["OutputInUseError", "OutputLock", "lock_path"]

#: errno values meaning "this filesystem cannot lock": the output is written unlocked.
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class OutputInUseError(RuntimeError):
    """Another run (or another sink of this one) holds the output a sink was about to write."""


def lock_path(output: str | os.PathLike[str]) -> str:
    """The lock file of ``output``: ``.<name>.lock`` in the same directory."""
    directory, name = os.path.split(os.path.abspath(os.fspath(output)))
    return os.path.join(directory, f".{name}.lock")


def _describe(holder: dict[str, object]) -> str:
    pid, host, since = holder.get("pid"), holder.get("host"), holder.get("since")
    who = f"pid {pid}" if pid is not None else "a process"
    if pid == os.getpid() and host == socket.gethostname():
        who += " (this process: another sink on the same output, or an earlier bus not closed yet: bus.close())"
    if host:
        who += f" on {host}"
    if isinstance(since, int | float):
        who += f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
    return who


class OutputLock:
    """The lock on one output file (or one directory's file set), held from :meth:`acquire` to :meth:`release`.

    Args:
        output: The file (or directory) the lock guards, named in messages.
        owner: Who takes it, for messages (a sink's name).
        what: What ``output`` is, for messages (e.g. ``"the CSV file"``).
        path: The lock file (default: :func:`lock_path` of ``output``).
    """

    def __init__(self, output: str | os.PathLike[str], owner: str, what: str, path: str | None = None) -> None:
        self.output = os.path.abspath(os.fspath(output))
        self.path = lock_path(self.output) if path is None else os.path.abspath(path)
        self.owner = owner
        self.what = what
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (idempotent); raise :class:`OutputInUseError` naming the holder if taken."""
        if self._fd is not None or fcntl is None:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        writable = True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except PermissionError:  # another user's lock file: lock it, but leave its holder note
            fd, writable = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC), False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read(fd)
            os.close(fd)
            raise OutputInUseError(
                f"{self.owner}: {self.what} {self.output!r} is being written by another run: {_describe(holder)}. "
                "Two writers would interleave or erase each other's output; wait for that run to end, "
                f"or write somewhere else (lock file {self.path!r})"
            ) from None
        except OSError as error:
            os.close(fd)
            if error.errno in _UNSUPPORTED:
                return  # this filesystem cannot lock (see the module docstring)
            raise
        if writable:
            note = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
            os.ftruncate(fd, 0)
            os.pwrite(fd, note.encode() + b"\n", 0)
        self._fd = fd

    def release(self) -> None:
        """Let go of the lock (idempotent); the lock file stays."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

    def __del__(self) -> None:
        # A sink dropped without being closed (a forgotten bus) must not hold its output forever.
        with contextlib.suppress(Exception):  # at interpreter exit os may be half gone; the kernel releases it then
            self.release()

    @staticmethod
    def _read(fd: int) -> dict[str, object]:
        try:
            data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except (OSError, ValueError):  # the holder is between taking the lock and writing its note
            return {}
        return data if isinstance(data, dict) else {}
