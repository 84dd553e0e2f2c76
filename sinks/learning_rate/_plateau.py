"""The plateau rule: when to reduce the learning rate, as keras.callbacks.ReduceLROnPlateau decides.

A pure function over a state record: :func:`decide` takes the rule, the state, one evaluation's
value and the rate in effect, and returns the new state and the new rate (or ``None``). The
sink (:class:`hookbus.sinks.ReduceLROnPlateauSink`) applies the rate and keeps the state through
the checkpoint barrier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from hookbus.validate import finite_number, non_negative_int

from .._monitor import Monitor
from ._steering import as_held

__all__ = ["PlateauDecision", "PlateauRule", "PlateauState", "above_min_lr", "below_min_lr", "decide", "plateau_rule"]


@dataclass(frozen=True)
class PlateauRule:
    """The settings of :func:`decide` (see :class:`~hookbus.sinks.ReduceLROnPlateauSink`)."""

    monitor: Monitor
    factor: float = 0.1
    patience: int = 10
    cooldown: int = 0
    min_lr: float = 0.0


def plateau_rule(
    monitor: Monitor, *, factor: object, patience: object, cooldown: object, min_lr: object
) -> PlateauRule:
    """A :class:`PlateauRule` from user arguments, each checked with a message naming it.

    Raises:
        ValueError: ``factor`` not in (0, 1) (Keras refuses ``factor >= 1``; a factor of 0 or
            less would set a rate of 0 or a negative one), ``patience`` or ``cooldown`` not a
            non-negative int, ``min_lr`` negative or not a finite number.
    """
    checked = finite_number("factor", factor)
    if checked is None or not 0.0 < checked < 1.0:
        raise ValueError(
            f"factor must be a number between 0 and 1, exclusive: the new rate is rate * factor (got {factor!r})"
        )
    floor = finite_number("min_lr", min_lr, non_negative=True)
    assert floor is not None  # not allow_none
    return PlateauRule(
        monitor=monitor,
        factor=checked,
        patience=non_negative_int("patience", patience),
        cooldown=non_negative_int("cooldown", cooldown),
        min_lr=floor,
    )


@dataclass(frozen=True)
class PlateauState:
    """What the plateau rule remembers between evaluations (saved with each checkpoint).

    Attributes:
        best: The best value so far (``None`` before the first evaluation).
        best_step: The step of ``best``.
        wait: Evaluations without improvement since the best, the last reduction or the end of
            a cooldown (Keras's ``wait``).
        cooldown: Evaluations left in the cooldown after a reduction (Keras's ``cooldown_counter``).
        reductions: Reductions so far.
    """

    best: float | None = None
    best_step: int | None = None
    wait: int = 0
    cooldown: int = 0
    reductions: int = 0


class PlateauDecision(NamedTuple):
    """The outcome of one evaluation: the new state, and the new rate where it reduces (else ``None``)."""

    state: PlateauState
    rate: float | None


def above_min_lr(rule: PlateauRule, rate: float) -> bool:
    """Whether ``rate`` is above ``min_lr``, compared at float32 (:func:`~._steering.as_held`): a
    rate set to ``min_lr`` and read back from a float32 variable is at ``min_lr``, not below it."""
    return bool(as_held(rate) > as_held(rule.min_lr))


def below_min_lr(rule: PlateauRule, rate: float) -> bool:
    """Whether ``rate`` is below ``min_lr``, compared as :func:`above_min_lr` compares (a ``min_lr``
    above the rate in effect never lets the rule reduce it)."""
    return bool(as_held(rate) < as_held(rule.min_lr))


def decide(rule: PlateauRule, state: PlateauState, value: float, rate: float, step: int = 0) -> PlateauDecision:
    """Decide on one evaluation of ``value`` (at ``step``) while ``rate`` is the learning rate in effect; pure.

    This is ``ReduceLROnPlateau.on_epoch_end``, quirks included: a cooldown in progress is
    counted down (and ``wait`` cleared) before the value is judged, so ``cooldown=1`` has no
    effect on consecutive bad evaluations; the first value is always an improvement; it
    reduces on the ``patience``-th evaluation without improvement (at once with
    ``patience=0``); improvement is ``value < best - min_delta`` in min mode (NaN never
    improves, and a first NaN is a best nothing beats). A reduction sets ``max(rate * factor,
    min_lr)``, and happens only while the rate is above ``min_lr`` (:func:`above_min_lr`):
    otherwise nothing changes, the cooldown does not start and ``wait`` keeps growing. A rate
    reduced to ``min_lr`` is held as ``min_lr`` is at float32 (rounding to float32 keeps order),
    so it is never reduced below it, nor again.
    """
    cooldown, wait = state.cooldown, state.wait
    if cooldown > 0:
        cooldown, wait = cooldown - 1, 0
    if rule.monitor.is_improvement(value, state.best):
        return PlateauDecision(PlateauState(value, step, 0, cooldown, state.reductions), None)
    if cooldown > 0:
        return PlateauDecision(PlateauState(state.best, state.best_step, wait, cooldown, state.reductions), None)
    wait += 1
    if wait >= rule.patience and above_min_lr(rule, rate):
        reduced = max(rate * rule.factor, rule.min_lr)
        return PlateauDecision(
            PlateauState(state.best, state.best_step, 0, rule.cooldown, state.reductions + 1), reduced
        )
    return PlateauDecision(PlateauState(state.best, state.best_step, wait, cooldown, state.reductions), None)
