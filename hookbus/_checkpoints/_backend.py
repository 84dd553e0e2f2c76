"""The checkpoint backend: what a publisher gives a checkpoint sink to save and restore its model.

A backend only moves a model's variables to and from a checkpoint prefix; when to save and what
to keep belong to :class:`~hookbus.sinks.CheckpointSink`, the files around a checkpoint (the
listing, the pointer, the sinks' states beside it) to the publisher's
:class:`~hookbus.publisher_api.CheckpointStore`. TensorFlow's implementations live under ``hookbus/_tf/``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["CheckpointBackend"]


@runtime_checkable
class CheckpointBackend(Protocol):
    """What a publisher provides so that a checkpoint sink can save and restore its model.

    A backend only moves variables; the sink owns the schedule and retention, the bus the
    barrier, the publisher's :class:`~hookbus.publisher_api.CheckpointStore` the files around them.
    """

    @property
    def ready(self) -> bool:
        """Whether a model (a live session) is there to save or restore now."""
        ...

    def save(self, path: str) -> str:
        """Write the model's variables to checkpoint prefix ``path``; return the prefix written.

        Must not touch the ``checkpoint`` state file nor delete anything.
        """
        ...

    def restore(self, path: str) -> None:
        """Load the variables saved at prefix ``path`` into the live model."""
        ...
