"""Holding a batch's deferred work until Keras moves on: the Keras publisher's side of the bus's hold.

What subscribers defer at a batch (a checkpoint's save) must wait until Keras moves on: to the
next batch, or past the epoch's end, whose validation and epoch record belong to the same step,
so that the save's barrier covers them. :class:`HeldWork` keeps at most one hold open.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["HeldWork"]


class HeldWork:
    """One hold of the bus's deferred work, opened at a published batch and closed once Keras moves on.

    Args:
        hold: Keeps deferred work and stop requests waiting (the publisher's side of the bus).
        release: Runs what ``hold`` kept waiting.
    """

    def __init__(self, hold: Callable[[], None], release: Callable[[], None]) -> None:
        self._hold = hold
        self._release = release
        self.held = False

    def hold(self) -> None:
        """Keep the work deferred from here waiting; a hold already open stays the one."""
        if not self.held:
            self.held = True
            self._hold()

    def release(self) -> None:
        """Run what the open hold kept waiting (nothing when none is open); idempotent."""
        if self.held:
            self.held = False
            self._release()

    def forget(self) -> None:
        """The run whose work was held ended (its dispatcher starts afresh): nothing to release."""
        self.held = False
