"""Keep TensorFlow's start-up notices off a screen that hookbus draws on (``hookbus demo``).

TensorFlow 2.21 logs ``oneDNN custom operations are on ...`` at INFO from ``port.cc`` while its
shared libraries load, once per library, on CPUs where oneDNN is on by default (AVX512-VNNI and
newer) or wherever ``TF_ENABLE_ONEDNN_OPTS=1``. The record goes through Abseil's logging before
``absl::InitializeLog()`` has run, so Abseil writes it straight to file descriptor 2 with the
banner ``WARNING: All log messages before absl::InitializeLog() is called are written to
STDERR``; ``TF_CPP_MIN_LOG_LEVEL`` (read by TensorFlow's own logger) does not reach it. The only
switch that silences it, ``TF_ENABLE_ONEDNN_OPTS=0``, also changes which kernels run, so hookbus
never sets it. Instead :func:`held_startup_notices` holds what native code writes to descriptor 2
while TensorFlow loads and writes back everything except informational log records and that
banner: warnings, errors and anything not shaped like a log record still reach the user.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import IO

__all__ = ["drop_info_records", "held_startup_notices"]

# The first line of a native log record: Abseil's / glog's "I0000 00:00:1700000000.123456  1234
# port.cc:153] ..." and TensorFlow's own "2026-01-01 12:00:00.123456: I tensorflow/...cc:42] ...".
_RECORD = re.compile(
    rb"^(?:(?P<absl>[IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]\s]+:\d+\]"
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?P<tsl>[IWEF]) [^\]\s]+:\d+\])"
)
_ABSL_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def drop_info_records(data: bytes) -> bytes:
    """Return ``data`` (native stderr output) without INFO log records and Abseil's banner.

    A record is its first line and every following line that does not start a new record (the
    ``To enable the following instructions: ...`` tail of ``cpu_feature_guard``). Lines before
    the first record, WARNING/ERROR/FATAL records and partial last lines are kept as written.
    """
    kept: list[bytes] = []
    dropping = False
    for line in data.splitlines(keepends=True):
        match = _RECORD.match(line)
        if match:
            dropping = (match.group("absl") or match.group("tsl")) == b"I"
        elif line.rstrip(b"\r\n") == _ABSL_BANNER:
            dropping = True  # the banner stands alone; what follows it is judged on its own
            continue
        if not dropping:
            kept.append(line)
    return b"".join(kept)


@contextlib.contextmanager
def held_startup_notices() -> Iterator[None]:
    """Hold native writes to file descriptor 2 inside the block; replay all but INFO records.

    Python's own ``sys.stderr`` keeps writing to the real stream meanwhile (warnings and
    tracebacks appear when they happen); only output that bypasses Python — TensorFlow's C++
    logging — is held, and on exit (also when the block raises) everything but informational
    records is written back. A process that dies inside the block loses what was held.
    """
    with contextlib.suppress(AttributeError, ValueError):  # no stderr, or a closed one
        sys.stderr.flush()  # what Python wrote before stays before what is held
    try:
        original = os.dup(2)
    except OSError:  # no descriptor 2 (a daemon): nothing can reach the screen anyway
        yield
        return
    try:
        held = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the with below; opening may fail
    except OSError:  # no writable temporary directory: better the notices than a failed start
        os.close(original)
        yield
        return
    with held:
        yield from _hold(original, held)


def _hold(original: int, held: IO[bytes]) -> Iterator[None]:
    python_stderr = sys.stderr
    own_stderr: io.TextIOWrapper | None = None
    try:
        if _writes_to_fd2(python_stderr):
            own_stderr = io.TextIOWrapper(
                io.FileIO(os.dup(original), "w"),
                encoding=getattr(python_stderr, "encoding", None) or "utf-8",
                errors="backslashreplace",
                line_buffering=True,
            )
            sys.stderr = own_stderr
        os.dup2(held.fileno(), 2)
        yield
    finally:
        if own_stderr is not None:
            own_stderr.flush()
            sys.stderr = python_stderr
            own_stderr.close()
        os.dup2(original, 2)
        os.close(original)
        held.seek(0)
        rest = drop_info_records(held.read())
        if rest:
            _write_all(2, rest)


def _writes_to_fd2(stream: object) -> bool:
    try:
        return stream is not None and stream.fileno() == 2  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
