"""Which way is better for a metric: the one rule every sink uses.

Early stopping's and checkpoint-on-best's ``mode="auto"`` (their default) and the dashboard's
"best" column ask this module, so they never disagree on a name (``auc`` used to be "max" on the
dashboard and undecidable for early stopping).
"""

from __future__ import annotations

__all__ = ["better_direction"]

#: Names that measure an error: lower is better. Checked first, so ``acc_loss`` is a loss and
#: ``mape`` (Keras's mean absolute percentage error) is not taken for ``map``.
_LOWER = ("loss", "error", "crossentropy", "mae", "mape", "mse", "msle")
#: Names that measure success: higher is better.
_HIGHER = ("acc", "auc", "precision", "recall", "f1", "iou", "map")
_DIRECTIONS = ("min", "max")


def better_direction(key: str, declared: str | None = None) -> str | None:
    """``"min"`` if lower is better for ``key``, ``"max"`` if higher is, ``None`` if nothing tells.

    ``declared`` is what the metric itself says, where a publisher knows it (a Keras compiled
    metric's own direction, as Keras's ``mode="auto"`` reads it): it wins. Otherwise the name
    decides: ``loss``, ``error``, ``crossentropy``, ``mae``, ``mape``, ``mse`` or ``msle``
    anywhere in it means ``"min"``; otherwise ``acc`` (accuracy), ``auc``, ``precision``,
    ``recall``, ``f1``, ``iou`` or ``map`` means ``"max"``. Case and prefixes (``eval/``,
    ``val_``) do not matter.
    """
    if declared in _DIRECTIONS:
        return declared
    name = key.lower()
    if any(word in name for word in _LOWER):
        return "min"
    if any(word in name for word in _HIGHER):
        return "max"
    return None
