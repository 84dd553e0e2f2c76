"""Which way a Keras model's compiled metrics go: what Keras's own ``mode="auto"`` reads.

Keras's ``MonitorCallback`` asks each compiled metric for its direction (``"up"`` or ``"down"``,
set by the metric class; a wrapped Keras loss is ``"down"``). Its compiled metrics are built only
at the first batch, so this reads the compile configuration instead and makes each metric from it
(``keras.metrics.get``), once, when a sink first asks: a monitor settles its mode before step 1.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from hookbus._publisher import EPOCH_PREFIX, EVAL_PREFIX

__all__ = ["CompiledDirections"]

logger = logging.getLogger("hookbus")

_KERAS_DIRECTIONS = {"up": "max", "down": "min"}


def _identifiers(config: Any) -> Iterator[Any]:
    """The metric identifiers in a compile configuration's ``metrics`` (a list, a dict by output,
    nested lists); a metric's own configuration is a dict with ``class_name``."""
    if isinstance(config, dict) and "class_name" not in config:
        for value in config.values():
            yield from _identifiers(value)
    elif isinstance(config, list | tuple):
        for value in config:
            yield from _identifiers(value)
    elif config is not None:
        yield config


def _named_direction(keras: Any, identifier: Any) -> tuple[str, str] | None:
    """``(the name Keras logs it under, "min" | "max")`` for one identifier, as Keras's
    ``compile_utils.get_metric`` names it; ``None`` if it cannot be made or declares nothing."""
    if isinstance(identifier, dict) and identifier.get("class_name") == "function":
        identifier = identifier.get("config")  # a plain function, logged under its own name
    try:
        metric = keras.metrics.get(identifier)
        if not isinstance(metric, keras.metrics.Metric):
            metric = keras.metrics.MeanMetricWrapper(metric, name=getattr(metric, "__name__", None))
    except Exception:  # a custom metric Keras cannot rebuild from its configuration: it tells nothing
        logger.debug("cannot rebuild metric %r from the compile configuration", identifier, exc_info=True)
        return None
    # Keras's own attribute for this, read as its MonitorCallback reads it.
    direction = _KERAS_DIRECTIONS.get(getattr(metric, "_direction", None) or "")
    if direction is None:
        return None
    return (identifier if isinstance(identifier, str) else str(metric.name)), direction


class CompiledDirections:
    """``key -> "min" | "max" | None`` for a compiled Keras model, by the metric behind the key.

    Keys are bus keys: ``mae``, ``eval/mae``, ``epoch/val_mae`` all ask about the metric ``mae``.
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self._directions: dict[str, str] | None = None

    def _read(self) -> dict[str, str]:
        from hookbus._keras import require_keras

        keras = require_keras("EventBusCallback")
        config = self._model.get_compile_config() or {}
        identifiers = [i for key in ("metrics", "weighted_metrics") for i in _identifiers(config.get(key))]
        return dict(named for named in (_named_direction(keras, i) for i in identifiers) if named is not None)

    def __call__(self, key: str) -> str | None:
        if self._directions is None:
            self._directions = self._read()
        name = key.removeprefix(EVAL_PREFIX).removeprefix(EPOCH_PREFIX).removeprefix("val_")
        return self._directions.get(name)
