"""The model seam: what a training publisher offers of its live model beyond its weights in
memory, for sinks that show or ship it: the variables' values by name (TensorBoard's
histograms) and a way to write the model for serving (:class:`~hookbus.sinks.ExportSink`).

TensorFlow's implementations live under ``hookbus/_tf/``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeAlias, runtime_checkable

__all__ = ["ModelExport", "VariablesOffer"]

#: What ``PublisherCore.offer_variables`` takes: returns the model's variables now, name to a
#: NumPy array (Keras's ``weight.path`` under ``fit``, the graph's variable names under the TF1
#: hook), read when a sink needs them (a histogram), never on a quiet step.
VariablesOffer: TypeAlias = Callable[[], Mapping[str, Any]]


@runtime_checkable
class ModelExport(Protocol):
    """Writes the live model for serving (``PublisherCore.offer_export``).

    Attributes:
        suffix: How the written path ends: ``".keras"`` (one file ``keras.models.load_model``
            opens) or ``""`` (a SavedModel directory with a ``serving_default`` signature).
        kind: The format in words, for messages (``"a .keras file"``, ``"a SavedModel"``).
    """

    suffix: str
    kind: str

    @property
    def ready(self) -> bool:
        """Whether the model can be written now (the TF1 hook's: while its session is open)."""
        ...

    def export(self, path: str) -> None:
        """Write the model as it is now to ``path``, which does not exist yet (the caller moves it
        into place): never changes the model or training."""
        ...
