"""The checkpoint seam: what a checkpoint sink (and a sink that reads checkpoints) gets of its bus.

One object, :attr:`hookbus.sink_api.SinkContext.checkpoints`. The sink decides when to save and what to
keep; through this seam it asks the bus to run the barrier for a step (vetoes, flush, states, the
model through the publisher's backend, the states beside it), to make a list of checkpoints the
pointer's and prune the rest, and to publish ``checkpoint_saved``. Every file it touches goes
through :attr:`Checkpoints.store`, the store the publisher gave with its backend (TensorFlow's
layout under the TensorFlow publishers), so the sink never assumes a layout. The bus's side of the seam is
:class:`hookbus._bus._services.BusCheckpoints`.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hookbus._checkpoints._store import CheckpointStore
    from hookbus._contract._events import CheckpointSaved

__all__ = ["Checkpoints"]


class Checkpoints(Protocol):
    """Checkpointing as the bus offers it to one sink for one run (:attr:`hookbus.sink_api.SinkContext.checkpoints`)."""

    @property
    def offered(self) -> bool:
        """Whether a train publisher offers checkpoints (a backend and its store) on this bus."""
        ...

    @property
    def ready(self) -> bool:
        """Whether the publisher's model can be saved now (a live session or model)."""
        ...

    @property
    def store(self) -> CheckpointStore:
        """The publisher's checkpoint store: listing, the pointer, state files, removing.

        Raises:
            RuntimeError: No publisher offers checkpoints (see :attr:`offered`).
        """
        ...

    def check_state_names(self) -> None:
        """Fail, naming them, if two sinks with state share a name (their states are saved by name)."""
        ...

    def save(self, step: int, prefix: str, value: float | None, taken: Container[int] = ()) -> str | None:
        """The checkpoint barrier for ``step``: vetoes, flush, states, then the model at ``prefix``
        and the states beside it. The prefix written, or ``None`` when a control sink vetoed or
        the step the model holds (parameter-server training) is in ``taken``. The pointer is
        not touched: see :meth:`keep_only`."""
        ...

    def keep_only(self, directory: str, kept: list[str], dropped: list[str]) -> None:
        """Make ``kept`` (latest last) the pointer's checkpoints, atomically; then remove ``dropped``."""
        ...

    def mark_evaluated(self, prefix: str) -> None:
        """``prefix`` (a checkpoint of the current step) was evaluated: flush, then write the
        sinks' states beside it again, marked ``evaluated``."""
        ...

    def load_states(self, states: Mapping[str, Any]) -> None:
        """Give each sink its state saved beside a checkpoint (``states``: by sink name)."""
        ...

    def publish(self, saved: CheckpointSaved) -> None:
        """Publish ``checkpoint_saved``."""
        ...

    def find(self, step: int) -> str | None:
        """The prefix of a checkpoint of ``step`` that a checkpoint sink of this bus keeps, or ``None``."""
        ...
