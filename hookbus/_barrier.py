"""The checkpoint barrier's prepare phase, run by the bus through the :class:`Sink` interface.

Before a checkpoint at step S becomes visible, every writer must have handed everything up to S
to the OS and every stateful sink's state for S must be collected to be written beside it; a
control sink may veto the save (the NaN guard on a non-finite step). The bus runs this on the
training thread for whichever sink saves (``CheckpointSink``), which then commits: writes the
states and the model, the pointer, and prunes. No sink needs to know another's class.

An observability writer that cannot flush (a full disk, a file-size limit, a file it may no
longer write) must not stop training: a sink whose policy isolates its errors is reported and
disabled, and the checkpoint is saved without its state. Its output has then lost the
exactly-once promise, and the report says so.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookbus._bus import EventBus
    from hookbus._subscriber import Subscriber

__all__ = ["Barrier", "PreparedCheckpoint"]

logger = logging.getLogger("hookbus")


@dataclass(frozen=True)
class PreparedCheckpoint:
    """What the prepare phase hands to the commit: the step and every live sink's state.

    Attributes:
        step: The step the checkpoint holds.
        states: ``state_dict()`` of every sink with state, by sink name.
    """

    step: int
    states: Mapping[str, dict[str, Any]]


class Barrier:
    """Prepares checkpoints for the bus that owns it (flush, vetoes, states)."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus

    def _sinks(self) -> list[Subscriber]:
        return [r for r in self._bus.local_subscribers if r.sink is not None and not r.disabled]

    def veto(self, step: int) -> str | None:
        """The first control sink's reason not to save a checkpoint of ``step``, or ``None``."""
        for record in self._sinks():
            sink = record.sink
            assert sink is not None
            if sink.controls_training:
                reason = sink.checkpoint_veto(step)
                if reason is not None:
                    return f"{sink.name}: {reason}"
        return None

    def prepare(self, step: int) -> PreparedCheckpoint | None:
        """Flush every live sink, collect their states; ``None`` when a control sink vetoes.

        A sink whose flush raises is disabled and reported when its policy is ``"isolate"`` or
        ``"disable"``; a ``"raise"`` sink's error propagates (the save does not happen).
        """
        reason = self.veto(step)
        if reason is not None:
            logger.warning("no checkpoint of step %d: %s", step, reason)
            return None
        for record in self._sinks():
            sink = record.sink
            assert sink is not None
            try:
                sink.flush()
            except Exception as error:
                if record.on_error == "raise":
                    raise
                self._disable(record, step, error)
        states = {r.name: state for r in self._sinks() if (state := r.sink.state_dict())}  # type: ignore[union-attr]
        return PreparedCheckpoint(step, states)

    def _disable(self, record: Subscriber, step: int, error: Exception) -> None:
        record.errors += 1
        record.disabled = True
        logger.error(
            "subscriber %r could not flush for the checkpoint at step %d and is disabled for the rest of "
            "the run (on_error=%r); the checkpoint is saved without it. Its output has lost the "
            "exactly-once promise: what it had not written is missing, and a resume will not rewrite it",
            record.name,
            step,
            record.on_error,
            exc_info=error,
        )
        self._bus.announce_error(record, "flush", step, error)
