"""Keras's own callbacks, told apart by their exact class, for :func:`hookbus.from_keras`."""

from __future__ import annotations

from typing import Any

from hookbus._tf._import import require_keras

__all__ = ["KERAS_CALLBACKS", "keras_callback_name"]

#: The Keras callbacks ``from_keras`` knows, by their public name in ``keras.callbacks``.
KERAS_CALLBACKS = (
    "TensorBoard",
    "ModelCheckpoint",
    "EarlyStopping",
    "CSVLogger",
    "TerminateOnNaN",
    "ReduceLROnPlateau",
    "LearningRateScheduler",
    "BackupAndRestore",
)


def keras_callback_name(callback: Any) -> str | None:
    """The name of the Keras callback ``callback`` is (``"TensorBoard"``, ...), or ``None``.

    Only an instance of the class itself counts: a subclass overrides what the class does, so
    its behaviour is its own and it passes through unconverted.
    """
    callbacks = require_keras("hookbus.from_keras").callbacks
    kind = type(callback)
    for name in KERAS_CALLBACKS:
        if kind is getattr(callbacks, name):
            return name
    return None
