"""The Keras callback's view of its model (:class:`~hookbus.publisher_api.ModelView`): the model
and ``fit``'s params, for sinks that show, ship, restore or steer by it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hookbus._contract._model import ModelView
from hookbus._tf._export_tf import KerasExport, KerasWeightsExport
from hookbus._tf._weights_tf import ModelWeights, model_variables
from hookbus._tf.keras._metrics import CompiledDirections

if TYPE_CHECKING:
    from hookbus._contract._model import EpochProgress

__all__ = ["KerasModelView"]

logger = logging.getLogger("hookbus")


class KerasModelView(ModelView):
    """A Keras model under ``fit`` (the callback offers it at train begin, withdraws it at train end).

    Args:
        model: The model ``fit`` trains (the callback's ``self.model``).
        params: Returns ``fit``'s params as Keras gives them to callbacks (``epochs``, ``steps``).
        progress: Returns the epoch ``fit`` is in, or ``None`` before the first epoch began.
    """

    def __init__(
        self, model: Any, params: Callable[[], Mapping[str, Any]], progress: Callable[[], EpochProgress | None]
    ) -> None:
        self._model = model
        self._params = params
        self._progress = progress
        self._weights = ModelWeights(model)
        self._export = KerasExport(model)  # ExportSink's .keras file
        self._weights_export = KerasWeightsExport(model)  # ExportSink(weights_only=True)'s .weights.h5
        self._directions = CompiledDirections(model)

    def weights(self) -> ModelWeights:
        return self._weights

    def export(self) -> KerasExport:
        return self._export

    def weights_export(self) -> KerasWeightsExport:
        return self._weights_export

    def variables(self) -> Mapping[str, Any]:
        return model_variables(self._model)

    def config(self) -> str | None:
        """The model's JSON configuration where Keras's ``TensorBoard(write_graph=True)`` writes one:
        Sequential and functional models (a subclassed model has no configuration to draw)."""
        model = self._model
        if type(model).__name__ not in ("Sequential", "Functional"):
            return None
        try:
            config: str = model.to_json()
        except Exception:  # as Keras: a model that fails to serialize is not drawn, and trains on
            logger.warning(
                "the model's configuration does not serialize to JSON; TensorBoard shows no graph of it", exc_info=True
            )
            return None
        return config

    def summary(self) -> str | None:
        """``model.summary()`` as text, its lines joined as MLflow's Keras callback joins them
        (``None`` where Keras cannot summarize the model, an unbuilt subclassed one)."""
        lines: list[str] = []
        try:
            self._model.summary(print_fn=lambda line, *args, **kwargs: lines.append(line))
        except ValueError:
            return None
        return "\n".join(lines)

    def training_params(self) -> dict[str, Any]:
        """``fit``'s parameters as Keras gives them to callbacks (``epochs``; ``steps`` per epoch,
        where known) and the optimizer's configuration as ``optimizer_<name>`` (what MLflow's Keras
        callback logs)."""
        params = self._params()
        fit = {"epochs": params.get("epochs"), "steps_per_epoch": params.get("steps")}
        found: dict[str, Any] = {k: v for k, v in fit.items() if v is not None}  # steps: None, unknown length
        try:
            config = self._model.optimizer.get_config()
        except Exception:  # an optimizer that cannot say its configuration still trains
            logger.debug("the optimizer's configuration is not readable", exc_info=True)
            config = {}
        found.update({f"optimizer_{k}": v for k, v in config.items()})  # None too, as MLflow's callback logs it
        return found

    def direction(self, key: str) -> str | None:
        """The direction a compiled metric declares (what Keras's own ``mode="auto"`` reads)."""
        return self._directions(key)

    def ends_epochs(self) -> bool:
        return True

    def progress(self) -> EpochProgress | None:
        return self._progress()
