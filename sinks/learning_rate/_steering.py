"""What the learning-rate sinks hold of the rate they steer: the publisher's rate, the rate in
effect (a request not yet applied included), and what of it goes in their checkpoint state."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hookbus.sink_api import require_learning_rate

if TYPE_CHECKING:
    from hookbus.sink_api import LearningRate, LearningRateChange, SinkContext

__all__ = ["RateSteering", "as_held", "change_line", "same_rate"]


def as_held(rate: float) -> np.float32:
    """``rate`` at the precision every comparison of rates is made at: float32.

    The one rule for comparing rates (with each other, with ``min_lr``): a rate read back from a
    float32 rate variable (Keras's optimizers', TensorFlow's default) is the float32 nearest to
    the rate that was set, so ``0.005`` set is ``0.004999999888`` read, below ``0.005`` as a
    Python float. Compared at float32 they are one, as Keras's ``ReduceLROnPlateau`` compares
    the optimizer's rate with ``np.float32(min_lr)``. A float64 rate variable is compared at
    float32 too: rates closer than float32 tells apart count as the same.
    """
    return np.float32(rate)


def same_rate(a: float, b: float) -> bool:
    """Whether two rates are one at the precision rates are compared at (:func:`as_held`)."""
    return bool(as_held(a) == as_held(b))


def change_line(change: LearningRateChange) -> str:
    """The dashboard's status line for an applied change: ``lr 0.001 → 0.0001 at step N: <reason>``."""
    return f"lr {change.old:.3g} → {change.new:.3g} at step {change.step}: {change.reason}"


class RateSteering:
    """What both learning-rate sinks hold of the rate they steer: the publisher's
    :class:`~hookbus.sink_api.LearningRate`, the rate in effect, and what goes in their state."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.rate: LearningRate | None = None
        self.reasons: set[str] = set()  # the reasons it gave: its changes, whoever relays them
        self.last_change: str | None = None

    def require(self, context: SinkContext) -> LearningRate:
        if self.rate is None:
            self.rate = require_learning_rate(context, self.owner)
        return self.rate

    @staticmethod
    def in_effect(lr: LearningRate) -> tuple[float, float]:
        """``(rate, multiplier)`` from the next step on: a request waiting to be applied included,
        whichever sink made it (what Keras reads back from the optimizer after a callback set it)."""
        pending = lr.pending
        if pending is None:
            return lr.rate, lr.multiplier
        if pending.multiplier is not None:
            return lr.rate / lr.multiplier * pending.multiplier, pending.multiplier
        assert pending.rate is not None
        return pending.rate, lr.multiplier * pending.rate / lr.rate if lr.scheduled else 1.0

    def ask(self, lr: LearningRate, rate: float, reason: str) -> None:
        """Ask for ``rate`` from the next step on (on a schedule: the multiplier that gives it now)."""
        current, multiplier = self.in_effect(lr)
        self.reasons.add(reason)
        if lr.scheduled:
            lr.request(reason=reason, multiplier=multiplier * rate / current)
        else:
            lr.request(reason=reason, rate=rate)

    def state(self) -> dict[str, float]:
        """The rate (or, on a schedule, the multiplier) in effect from the next step on, for the
        checkpoint: a request not applied when the checkpoint's values were taken included."""
        lr = self.rate
        if lr is None:
            return {}
        rate, multiplier = self.in_effect(lr)
        return {"multiplier": multiplier} if lr.scheduled else {"rate": rate}

    def put_back(self, state: dict[str, Any], reason: str) -> None:
        """After a restart: ask for what was in effect at the checkpoint where the restored model
        does not hold it (hookbus's multiplier, or a rate asked for and not yet applied then)."""
        lr = self.rate
        if lr is None:
            return
        name = "multiplier" if lr.scheduled else "rate"
        saved, held = state.get(name), lr.multiplier if lr.scheduled else lr.rate
        if saved is None or same_rate(float(saved), held):
            return
        self.reasons.add(reason)
        if lr.scheduled:
            lr.request(reason=reason, multiplier=float(saved))
        else:
            lr.request(reason=reason, rate=float(saved))

    def changed(self, change: LearningRateChange) -> None:
        if change.source == self.owner or change.reason in self.reasons:
            self.last_change = change_line(change)
