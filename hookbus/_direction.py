"""Which way is better for a metric, from its name: the one rule every sink uses.

Early stopping's and checkpoint-on-best's ``mode="auto"`` and the dashboard's "best" column ask
this module, so they never disagree on a name (``auc`` used to be "max" on the dashboard and
undecidable for early stopping).
"""

from __future__ import annotations

__all__ = ["better_direction"]

#: Names that measure an error: lower is better. Checked first, so ``acc_loss`` is a loss.
_LOWER = ("loss", "error")
#: Names that measure success: higher is better.
_HIGHER = ("acc", "auc", "precision", "recall", "f1", "iou", "map")


def better_direction(key: str) -> str | None:
    """``"min"`` if lower is better for ``key``, ``"max"`` if higher is, ``None`` if the name can't tell.

    ``loss`` or ``error`` anywhere in the name means ``"min"``; otherwise ``acc`` (accuracy),
    ``auc``, ``precision``, ``recall``, ``f1``, ``iou`` or ``map`` means ``"max"``. Case and
    prefixes (``eval/``, ``val_``) do not matter.
    """
    name = key.lower()
    if any(word in name for word in _LOWER):
        return "min"
    if any(word in name for word in _HIGHER):
        return "max"
    return None
