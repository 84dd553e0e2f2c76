"""How a run ended, in one word that every output uses.

``finished``: the run did what it was asked: its last step, a stop at a step, early stopping, a
stop decided by a subscriber or by the training thread's own code, the end of its input, or a
stop another worker of the cluster decided. ``stopped``: preempted or interrupted, and resumable:
a signal (SIGTERM, the first Ctrl-C), a ``KeyboardInterrupt``, a stop requested from another
thread. ``crashed``: an exception. A run that never said how it ended (SIGKILL, an OOM kill) is
``presumed dead``: the watcher's word for a log that went silent, and the tracker's for a run
whose process was gone when the next training started in its place. The dashboard's summary,
the event log's ``close`` record, ``hookbus watch`` (its exit status) and the tracker's run status
all read it from here.
"""

from __future__ import annotations

from hookbus._contract._events import StopRequest

__all__ = [
    "CRASHED",
    "DEAD",
    "ENDINGS",
    "EXIT_STATUS",
    "FINISHED",
    "STOPPED",
    "TRACKER_STATUS",
    "how_ended",
    "stopped_from_outside",
]

FINISHED, STOPPED, CRASHED = "finished", "stopped", "crashed"
ENDINGS = (FINISHED, STOPPED, CRASHED)
#: A run whose process died without saying how it ended (SIGKILL, an OOM kill).
DEAD = "presumed dead"
#: ``hookbus watch``'s exit status for a run that ended so.
EXIT_STATUS = {FINISHED: 0, CRASHED: 1, STOPPED: 3}
#: A tracker's (MLflow's) run status for a run that ended so.
TRACKER_STATUS = {FINISHED: "FINISHED", STOPPED: "KILLED", CRASHED: "FAILED", DEAD: "KILLED"}


def stopped_from_outside(source: str) -> bool:
    """Whether a stop request's ``source`` preempted the run (a signal, another thread)."""
    return source == "signal" or source.startswith("thread ")


def how_ended(stop: StopRequest | None, error: BaseException | None) -> str:
    """The one word for a run whose first stop request was ``stop`` and that raised ``error``."""
    if isinstance(error, KeyboardInterrupt):
        return STOPPED
    if error is not None:
        return CRASHED
    if stop is not None and stopped_from_outside(stop.source):
        return STOPPED
    return FINISHED
