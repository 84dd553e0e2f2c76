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

from hookbus._contract._publisher_keys import EPOCH_PREFIX, EVAL_PREFIX

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


def _logged_name(identifier: Any) -> str | None:
    """The name Keras logs a compiled metric under, as ``compile_utils.get_metric`` names it:
    a string identifier's own, a function's name, a metric configuration's ``name``."""
    if isinstance(identifier, str):
        return identifier
    if isinstance(identifier, dict):
        config = identifier.get("config")
        if identifier.get("class_name") == "function":
            return config if isinstance(config, str) else None
        name = config.get("name") if isinstance(config, dict) else None
        return name if isinstance(name, str) else None
    return None


def _direction(keras: Any, identifier: Any) -> str | None:
    """``"min"`` or ``"max"`` as the metric ``identifier`` declares it; ``None`` if it cannot
    be made (a custom metric Keras cannot rebuild from its configuration) or declares nothing."""
    if isinstance(identifier, dict) and identifier.get("class_name") == "function":
        identifier = identifier.get("config")  # a plain function, by its name
    try:
        metric = keras.metrics.get(identifier)
        if not isinstance(metric, keras.metrics.Metric):
            metric = keras.metrics.MeanMetricWrapper(metric)
    except Exception:
        logger.debug("cannot rebuild metric %r from the compile configuration", identifier, exc_info=True)
        return None
    # Keras's own attribute for this, read as its MonitorCallback reads it.
    return _KERAS_DIRECTIONS.get(getattr(metric, "_direction", None) or "")


class CompiledDirections:
    """``key -> "min" | "max" | None`` for a compiled Keras model, by the metric behind the key.

    Keys are bus keys: ``mae``, ``eval/mae``, ``epoch/val_mae`` all ask about the metric ``mae``.
    Only a metric the key names is made (once): ``eval/loss`` makes none.
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self._found: dict[str, str | None] = {}

    def __call__(self, key: str) -> str | None:
        name = key.removeprefix(EVAL_PREFIX).removeprefix(EPOCH_PREFIX).removeprefix("val_")
        if name not in self._found:
            self._found[name] = self._lookup(name)
        return self._found[name]

    def _lookup(self, name: str) -> str | None:
        config = self._model.get_compile_config() or {}
        for key in ("metrics", "weighted_metrics"):
            for identifier in _identifiers(config.get(key)):
                if _logged_name(identifier) == name:
                    from hookbus._tf._import import require_keras

                    return _direction(require_keras("EventBusCallback"), identifier)
        return None
