"""The weights seam: what a publisher offers so that a sink can keep a copy of a live model's
weights and put it back (``EarlyStoppingSink(restore_best=True)``, as Keras's
``EarlyStopping(restore_best_weights=True)`` does).

Weights only: the optimizer's slots and the step stay as they are, so restoring never moves
training, or a checkpoint, back. TensorFlow's implementations live under ``hookbus/_tf/``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["WeightsBackend"]


@runtime_checkable
class WeightsBackend(Protocol):
    """Takes and puts back a copy of a live model's weights (``PublisherCore.offer_weights``)."""

    def snapshot(self) -> object:
        """A copy of the weights now, independent of later training steps."""
        ...

    def restore(self, snapshot: object) -> None:
        """Put the weights of ``snapshot`` back into the live model."""
        ...

    def read(self, prefix: str) -> object | None:
        """The weights the checkpoint ``prefix`` holds, as a snapshot, leaving the live model as
        it is; ``None`` where they cannot be read from it."""
        ...
