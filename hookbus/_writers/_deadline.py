"""The deadline every writer's flush has: a stalled disk is reported and given up, never waited for.

A flush that does not return in time — a stalled disk, a hung NFS or FUSE mount, an unreachable
tracker — must not hang training, the checkpoint barrier or the end of a run. One object,
:class:`FlushDeadline`, holds a writer's deadline and, once a flush missed it, the writer's stall;
:class:`~hookbus.sink_api.BackgroundWriter` waits through it, and :class:`~hookbus.sink_api.OwnThreadWriter` runs
the flush of a writer with a thread of its own (TensorBoard's ``EventFileWriter``) through it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NoReturn

from hookbus._rules._validate import seconds

__all__ = ["DEFAULT_FLUSH_DEADLINE", "FlushDeadline", "WriterError", "WriterStalled"]

_POLL_SECS = 0.05  # how often a waiting caller re-checks the writer's thread
#: Seconds a writer's flush may take before the writer counts as stalled (every writer's default):
#: a healthy disk flushes a full queue in well under a second; a hung NFS or FUSE mount never does.
DEFAULT_FLUSH_DEADLINE = 30.0


class WriterError(RuntimeError):
    """A writer failed: its thread raised (the original exception is the ``__cause__``), or it
    stalled (:class:`WriterStalled`)."""


class WriterStalled(WriterError):
    """A writer's flush (or a wait for room in its queue) did not end within its deadline."""


class FlushDeadline:
    """The deadline of one writer's flushes, and the writer's stall once one missed it.

    The one mechanism every writer shares. :class:`BackgroundWriter` waits for its own thread
    through :meth:`wait`; a sink whose writer has a thread of its own (TensorBoard's
    ``EventFileWriter``, a tracker's client) runs that writer's blocking flush through :meth:`run`.
    A flush that misses the deadline raises :class:`WriterStalled` and the writer is stalled for
    good (:attr:`report` says what it could not write): later flushes fail at once, and the
    thread stuck in the write is never waited for again — it is a daemon, so the process exits.

    Args:
        name: The writer's name (the sink's), first in the report.
        deadline: Seconds a flush may take (a positive finite number; sinks default to
            :data:`DEFAULT_FLUSH_DEADLINE`, 30.0).
        target: What the writer writes, for the report (a path, or a directory's event files).
    """

    def __init__(self, name: str, deadline: float, target: str) -> None:
        self.name, self.seconds, self.target = name, seconds("deadline", deadline), target
        #: The stall, once a flush missed the deadline: writer, target and what was not written.
        self.report: str | None = None

    @property
    def stalled(self) -> bool:
        """Whether a flush has missed the deadline (the writer is given up)."""
        return self.report is not None

    def check(self) -> None:
        """Raise :class:`WriterStalled` again if the writer stalled before."""
        if self.report is not None:
            raise WriterStalled(self.report)

    def stall(self, waited: str, unwritten: str) -> NoReturn:
        """Give the writer up: record the report (``waited`` and ``unwritten`` say what) and raise it."""
        self.report = (
            f"{self.name}: {waited} {self.target} did not return within the {self.seconds:g} s flush deadline "
            f"(a stalled disk or a hung network filesystem?); {unwritten}. The writer is given up"
        )
        raise WriterStalled(self.report)

    def wait(self, done: threading.Event, unwritten: Callable[[], str], alive: Callable[[], bool]) -> bool:
        """Wait for ``done``: True once set, False if the writer's thread died first (``alive``).

        Raises :class:`WriterStalled` (the message ends with ``unwritten()``) at the deadline.
        """
        self.check()
        end = time.monotonic() + self.seconds
        while not done.wait(_POLL_SECS):
            if not alive():
                return done.is_set()
            if time.monotonic() >= end:
                self.stall("a flush of", unwritten())
        return True

    def run(self, flush: Callable[[], None], unwritten: Callable[[], str]) -> None:
        """Run a writer's own blocking ``flush`` on a helper thread and wait within the deadline.

        Its exception is raised here. Past the deadline the helper is left blocked (a daemon).
        """
        self.check()
        done = threading.Event()
        failure: list[BaseException] = []

        def target() -> None:
            try:
                flush()
            except BaseException as error:  # raised on the caller's thread below
                failure.append(error)
            finally:
                done.set()

        threading.Thread(target=target, name=f"hookbus-flush[{self.name}]", daemon=True).start()
        self.wait(done, unwritten, lambda: True)
        if failure:
            raise failure[0]
