"""The loop publisher's view of its model (:class:`~hookbus.publisher_api.ModelView`): the
variables given as ``weights=`` and the ``serving=`` model, in memory for the whole loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hookbus._contract._model import ModelView

if TYPE_CHECKING:
    from hookbus._contract._model import ModelExport
    from hookbus._tf._weights_tf import VariableWeights

__all__ = ["LoopModelView"]


class LoopModelView(ModelView):
    """A hand-written loop's model, as much of it as the loop gave ``LoopPublisher``.

    Args:
        weights: The ``weights=`` variables (take and put back, histograms), else ``None``.
        export: Writes the ``serving=`` model as a SavedModel, else ``None``.
    """

    def __init__(self, weights: VariableWeights | None, export: ModelExport | None) -> None:
        self._weights = weights
        self._export = export

    def weights(self) -> VariableWeights | None:
        return self._weights

    def variables(self) -> Mapping[str, Any] | None:
        return None if self._weights is None else self._weights.named()

    def export(self) -> ModelExport | None:
        return self._export
