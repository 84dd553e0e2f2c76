"""TensorFlow's weights backends (:class:`~hookbus.publisher_api.WeightsBackend`): a Keras model's
weights and a list of variables' weights in memory, what a publisher offers so that a sink can
keep and put back the weights of one step (``EarlyStoppingSink(restore_best=True)``, as Keras's
``EarlyStopping(restore_best_weights=True)`` does).

Weights only: the optimizer's slots and the step stay as they are, so restoring never moves
training, or a checkpoint, back. A Keras model and TensorFlow variables are used through their
own methods; only reading weights from a checkpoint imports TensorFlow (lazily).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from hookbus._tf._import import require_tensorflow

__all__ = ["ModelWeights", "VariableWeights", "model_variables", "variable_name"]


def variable_name(variable: Any) -> str:
    """A variable's name as Keras's ``TensorBoard`` tags its histogram: Keras 3's ``path``
    (``dense/kernel``), else TensorFlow's ``name`` without its ``:0``."""
    path = getattr(variable, "path", None)
    name = path if isinstance(path, str) else str(variable.name)
    return name[:-2] if name.endswith(":0") else name.replace(":", "_")


def model_variables(model: Any) -> dict[str, Any]:
    """A Keras model's weights by name, layer by layer as Keras's ``TensorBoard(histogram_freq=...)``
    walks them (``model.layers``, each layer's ``weights``), as NumPy arrays."""
    return {variable_name(w): np.asarray(w.numpy()) for layer in model.layers for w in layer.weights}


class ModelWeights:
    """A Keras model's weights: ``model.get_weights()`` / ``model.set_weights()``, as Keras's
    ``EarlyStopping(restore_best_weights=True)`` takes and restores them (trainable and
    non-trainable weights; no optimizer state)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def snapshot(self) -> object:
        return self.model.get_weights()

    def restore(self, snapshot: object) -> None:
        self.model.set_weights(snapshot)

    def read(self, prefix: str) -> object | None:
        """Read through ``tf.train.Checkpoint(model=...)``: the layout of the Keras callback's own
        checkpoints (a custom ``checkpoint=`` may lay them out otherwise: then ``None``)."""
        tf = require_tensorflow("reading a model's weights from a checkpoint")
        live = self.model.get_weights()
        # A Keras model tracks its optimizer: reading the model reads the optimizer's state too.
        optimizer = getattr(self.model, "optimizer", None)
        slots = VariableWeights(optimizer.variables) if optimizer is not None and optimizer.variables else None
        live_slots = slots.snapshot() if slots is not None else None
        try:
            tf.train.Checkpoint(model=self.model).read(prefix).expect_partial().assert_existing_objects_matched()
            held: object = self.model.get_weights()
            return held
        except (AssertionError, ValueError, tf.errors.OpError):
            return None
        finally:
            self.model.set_weights(live)
            if slots is not None:
                slots.restore(live_slots)


class VariableWeights:
    """The values of given TensorFlow variables (``LoopPublisher(weights=model.weights)``)."""

    def __init__(self, variables: Iterable[Any]) -> None:
        self.variables = list(variables)
        for variable in self.variables:
            if not (callable(getattr(variable, "numpy", None)) and callable(getattr(variable, "assign", None))):
                raise TypeError(f"weights must be TensorFlow variables (with .numpy() and .assign()); got {variable!r}")
        if not self.variables:
            raise ValueError("weights must name at least one variable (got none)")

    def snapshot(self) -> object:
        return [np.array(variable.numpy(), copy=True) for variable in self.variables]  # no view of a live buffer

    def restore(self, snapshot: object) -> None:
        assert isinstance(snapshot, list)
        for variable, value in zip(self.variables, snapshot, strict=True):
            variable.assign(value)

    def named(self) -> dict[str, Any]:
        """The variables' values by name (:func:`variable_name`), as NumPy arrays: histograms."""
        return {variable_name(v): np.asarray(v.numpy()) for v in self.variables}

    def read(self, prefix: str) -> object | None:
        """``None``: which entry of a user's checkpoint holds which variable is not known here."""
        return None
