"""The console's lines for a worker's start gate (``waiting_for_step``, :class:`hookbus.sink_api.WaitForStep`)."""

from __future__ import annotations

from hookbus.sink_api import WaitForStep

__all__ = ["gate_line"]

_ENDED = {"reached": "reached", "timed_out": "timed out waiting for", "stopped": "stopped waiting for"}


def gate_line(event: WaitForStep) -> str:
    """``waiting for global step 40 (at 5, 3 s of 60 s)`` while it waits, then how it ended:
    ``reached global step 40 (at 41, after 7 s): training starts``."""
    goal, step, waited = f"global step {event.until_step:,}", f"{event.step:,}", f"{event.waited_secs:.0f} s"
    if event.state == "waiting":
        limit = "" if event.timeout_secs is None else f" of {event.timeout_secs:g} s"
        return f"waiting for {goal} (at {step}, {waited}{limit})"
    then = ": training starts" if event.starts else ""
    return f"{_ENDED.get(event.state, event.state)} {goal} (at {step}, after {waited}){then}"
