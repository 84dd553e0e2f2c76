"""Files written whole, and directories checked before anything is written to them.

Every layer that writes a small file whole (the checkpoint pointer, a sink's state beside a
checkpoint, the run files an evaluator reads, a CSV header rewritten at a resume) writes it
through :func:`write_atomically`, so a crash leaves the old file or the new one, never half of
one; every sink checks its output directory at construction with :func:`check_writable_dir`,
so a wrong path fails before step 1.
"""

from __future__ import annotations

import os
import secrets
import tempfile

__all__ = ["check_writable_dir", "make_writable_dir", "write_atomically"]


def check_writable_dir(directory: str, what: str) -> None:
    """Fail now if ``directory`` could not be created or written (cheap: nothing is created).

    Args:
        directory: Where files will go; it or its nearest existing ancestor is checked.
        what: Names the argument in the message (e.g. ``"logdir"``).
    """
    probe = os.path.abspath(directory)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ValueError(f"{what} {directory!r} cannot be created: {probe!r} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PermissionError(f"{what} {directory!r} is not writable: no write permission on {probe!r}")


def make_writable_dir(directory: str | os.PathLike[str]) -> None:
    """Create ``directory`` (and its parents) and check a file can be made in it.

    Raises:
        OSError: As the file system gave it, where either fails.
    """
    os.makedirs(directory, exist_ok=True)
    tempfile.TemporaryFile(dir=directory).close()


def write_atomically(target: str | os.PathLike[str], text: str) -> None:
    """Replace ``target`` with ``text`` all at once: a crash leaves the old file or the new one.

    A temporary file in the same directory, then ``os.replace``. No fsync (docs/guides/sinks/checkpoints.md
    "Checkpoints, resume and the barrier"): the promise is against process crashes (kill, OOM, preemption), where the OS
    keeps what was written; after a power loss it is as durable as TensorFlow's own checkpoint
    files and pointer, which are not fsynced either.
    """
    handle, temp = _create_temp(os.fspath(target))
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            file.write(text)
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.remove(temp)
        raise


def _create_temp(target: str) -> tuple[int, str]:
    """A new file beside ``target`` created with mode 0o666 less the umask, as TensorFlow's own files.

    ``tempfile.mkstemp`` would make it 0600, and ``os.replace`` keeps that mode: the CSV, the
    state files and the checkpoint pointer would then be unreadable to TensorBoard, an evaluator
    or a colleague running as another user.
    """
    directory, name = os.path.split(target)
    while True:
        temp = os.path.join(directory or ".", f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), temp
        except FileExistsError:  # another writer's temp file of the same name: draw again
            continue
