"""What a training publisher offers the sinks of its bus: its checkpoints, its learning rate, its
profiler and one view of its model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hookbus._contract._model import NOT_OFFERED, ModelView
from hookbus._contract._profiling import Profiling

if TYPE_CHECKING:
    from hookbus._checkpoints._backend import CheckpointBackend
    from hookbus._checkpoints._store import CheckpointStore
    from hookbus._contract._learning_rate import LearningRate
    from hookbus._contract._system import MachineOffer

__all__ = ["Offers"]


@dataclass
class Offers:
    """Set by the publishers' core (``PublisherCore.offer_*``), read by the sinks' contexts.

    Attributes:
        checkpoints: How the model is saved and restored, and the store that keeps its files
            (``None`` before a train publisher began).
        learning_rate: The training publisher's learning rate, where it offers one.
        profiler: The profiling seam: the windows asked for, and the publisher's profiler in it.
        model: The training publisher's :class:`~hookbus.sink_api.ModelView`; the base view,
            whose every member answers "not offered", while none is offered.
        machine: The GPUs the training publisher's framework uses and its allocator, for the
            machine's sampler (``None``: every GPU CUDA shows, no allocator).
    """

    checkpoints: tuple[CheckpointBackend, CheckpointStore] | None = None
    learning_rate: LearningRate | None = None
    profiler: Profiling = field(default_factory=Profiling)
    model: ModelView = NOT_OFFERED
    machine: MachineOffer | None = None
