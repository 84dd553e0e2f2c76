"""The learning-rate sinks: reduce it on a plateau (Keras's ``ReduceLROnPlateau``), or follow a schedule
(Keras's ``LearningRateScheduler``), for every publisher, with their state kept across restarts."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hookbus.sink_api import LEARNING_RATE_KEY, Priority, Schedule, Sink
from hookbus.validate import finite_number

from .._monitor import Monitor, check_scalar
from ._plateau import PlateauState, below_min_lr, decide, plateau_rule
from ._steering import RateSteering, same_rate

if TYPE_CHECKING:
    from hookbus.sink_api import Event, LearningRateChange, SinkContext

__all__ = ["LearningRateSchedulerSink", "ReduceLROnPlateauSink"]

logger = logging.getLogger("hookbus")


class _RateSink(Sink):
    """What both learning-rate sinks are: they control training and run before the checkpoint
    (a checkpoint at a step holds that step's decision), decide on the chief for every worker,
    stop the run on an error, and show the changes they asked for, whoever relays them."""

    priority = Priority.EARLY_STOPPING
    controls_training: ClassVar[bool] = True
    default_runs_on: ClassVar[str] = "chief"  # one decision, applied on every worker
    on_error = "raise"
    _steering: RateSteering

    def on_learning_rate_changed(self, change: LearningRateChange) -> None:
        self._steering.changed(change)


class ReduceLROnPlateauSink(_RateSink):
    """Reduces the learning rate when ``monitor`` stops improving: Keras's ``ReduceLROnPlateau``, on any publisher.

    Every event carrying ``monitor`` is one evaluation: each evaluation of an eval publisher
    (``"eval/loss"``, at whatever schedule it runs), or each due step for a training key (set
    ``every_n_steps``; the default is every step) — not only epoch ends. The rule is
    ``ReduceLROnPlateau.on_epoch_end``'s, Keras's quirks included (a cooldown is counted down
    before the value is judged, so ``cooldown=1`` has no effect on consecutive bad evaluations;
    the first value is always an improvement; it reduces on the ``patience``-th evaluation
    without improvement). A reduction asks the training publisher for ``max(rate * factor,
    min_lr)``, applied before the next training step (under ``MultiWorkerMirroredStrategy`` at
    one agreed step on every worker); the bus publishes ``learning_rate_changed`` and the
    dashboard shows ``lr 0.001 → 0.0001 at step N: eval/loss did not improve for 10
    evaluations ...``.

    Where the rate follows a schedule (a Keras ``LearningRateSchedule``, a TF1 rate tensor), the
    reduction is a multiplier on top of it (the multiplier shrinks by ``factor``; Keras raises
    ``TypeError`` instead). Best, wait, cooldown and the rate or multiplier it set are saved with
    each checkpoint and put back on resume, so a resumed run decides as an uninterrupted one.

    Args:
        monitor: The key to watch (default ``"eval/loss"``).
        factor: The new rate is ``rate * factor``; between 0 and 1, exclusive (default 0.1).
        patience: Evaluations without improvement before a reduction (default 10).
        mode: ``"auto"`` (default: the one direction rule, as early stopping's), ``"min"`` or ``"max"``.
        min_delta: A change smaller than this is no improvement (default 1e-4).
        cooldown: Evaluations after a reduction during which nothing is counted (default 0).
        min_lr: The rate is never reduced below this (default 0.0). Above the rate in effect,
            nothing is ever reduced: a warning says so, once a run. Rates and ``min_lr`` are
            compared at float32, the rate variable's precision (a rate at ``min_lr`` is at it,
            not below it, though the float32 rate read back is a little less than ``min_lr``).
        every_n_steps: The schedule for a training key (default every step).
        every_n_secs: With ``every_n_steps``, above.
        name: Name in reports and in checkpoint state (default the class name).
        runs_on: Where it runs in multi-worker training (default ``"chief"``: the chief decides,
            and its decision is applied on every worker at one agreed step; parameter-server
            workers share the chief's rate variable).

    Raises:
        ValueError: at construction for invalid settings; at ``begin`` when no publisher
            provides ``monitor`` (naming the known keys), ``mode="auto"`` cannot tell the
            direction, or the training publisher offers no learning rate (naming what to pass).
    """

    def __init__(
        self,
        monitor: str = "eval/loss",
        factor: float = 0.1,
        patience: int = 10,
        mode: str = "auto",
        min_delta: float = 1e-4,
        cooldown: int = 0,
        min_lr: float = 0.0,
        *,
        every_n_steps: int | None = None,
        every_n_secs: float | None = None,
        name: str | None = None,
        runs_on: str | None = None,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"monitor must be a non-empty key (got {monitor!r})")
        super().__init__(
            keys=monitor, every_n_steps=every_n_steps, every_n_secs=every_n_secs, name=name, runs_on=runs_on
        )
        margin = finite_number("min_delta", min_delta)
        self.rule = plateau_rule(
            Monitor(monitor, mode, margin or 0.0), factor=factor, patience=patience, cooldown=cooldown, min_lr=min_lr
        )
        self._start_clean()

    def _start_clean(self) -> None:
        self.state = PlateauState()
        self._steering = RateSteering(self.name)
        self._warned = False

    @property
    def monitor(self) -> str:
        return self.rule.monitor.key

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        self._start_clean()  # a new run: its state comes back only from a checkpoint

    def on_begin(self, event: Event) -> None:
        self.rule = replace(self.rule, monitor=self.rule.monitor.settled(self.name, self.context.model().direction))
        check_scalar(self.name, self.monitor, self.context.static_shape(self.monitor))
        if event.mode == "train":
            self._steering.require(self.context)

    def on_session_created(self, event: Event) -> None:
        if event.mode == "train" and not event.restored:
            self.state = PlateauState()  # a model no checkpoint gave: start clean

    def on_after_run(self, event: Event) -> None:
        value = self.rule.monitor.value(event.values)
        if value is None:
            return
        lr = self._steering.require(self.context)
        rate, _ = self._steering.in_effect(lr)
        if not self._warned and below_min_lr(self.rule, rate):
            self._warned = True
            logger.warning(
                "%s: min_lr %.6g is above the learning rate in effect (%.6g), so it never reduces the rate",
                self.name,
                self.rule.min_lr,
                rate,
            )
        before = self.state
        self.state, new = decide(self.rule, before, value, rate, event.step)
        if new is None:
            return
        s = self.state
        waited = (0 if before.cooldown > 0 else before.wait) + 1
        reason = (
            f"{self.monitor} did not improve for {waited} evaluation{'s' if waited != 1 else ''} "
            f"(best {s.best:.6g} at step {s.best_step})"
        )
        self._steering.ask(lr, new, reason)

    def state_dict(self) -> dict[str, Any]:
        s = self.state
        return {
            "best": s.best,
            "best_step": s.best_step,
            "wait": s.wait,
            "cooldown": s.cooldown,
            "reductions": s.reductions,
            **self._steering.state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        best, best_step = state.get("best"), state.get("best_step")
        self.state = PlateauState(
            best=None if best is None else float(best),
            best_step=None if best_step is None else int(best_step),
            wait=int(state.get("wait", 0)),
            cooldown=int(state.get("cooldown", 0)),
            reductions=int(state.get("reductions", 0)),
        )
        self._steering.put_back(state, f"{self.name}: the rate in effect at the checkpoint")

    def status(self) -> str:
        s = self.state
        if self._steering.last_change is not None:
            return self._steering.last_change
        best = "none yet" if s.best is None else f"best {s.best:.6g} @ {s.best_step}"
        return f"lr plateau: wait {s.wait}/{self.rule.patience} ({best})"


class LearningRateSchedulerSink(_RateSink):
    """Sets the learning rate from ``schedule``: Keras's ``LearningRateScheduler``, per epoch or per step.

    ``per="epoch"`` (Keras's): ``schedule(epoch, lr)`` with the 0-based epoch and the rate in
    effect sets the rate each epoch trains with (needs a publisher that trains in epochs,
    :class:`hookbus.EventBusCallback`). ``per="step"``: ``schedule(step, lr)`` with the number of
    completed steps (Keras's ``optimizer.iterations``, what a ``LearningRateSchedule`` is called
    with) sets the rate of the next step, on every publisher; evaluated every step, or every
    ``every_n_steps`` (the rate then holds in between). It receives the training events that
    carry the key ``learning_rate``: under ``fit`` declare it,
    ``EventBusCallback(bus, keys=["loss", "learning_rate"])``. A new rate is asked for only where it
    differs from the rate in effect, and applied before the next training step (under
    ``MultiWorkerMirroredStrategy`` at one agreed step on every worker). On a rate that follows
    a schedule, the rate it returns is reached through hookbus's multiplier. The last rate it set
    and its epoch or step are saved with each checkpoint and put back on resume.

    Args:
        schedule: ``(epoch or step, lr) -> new lr``; must take two arguments and return a
            finite number > 0.
        per: ``"epoch"`` (default, as Keras's) or ``"step"``.
        every_n_steps: With ``per="step"``, evaluate it every n steps (default every step).
        name: Name in reports and in checkpoint state (default the class name).
        runs_on: Where it runs in multi-worker training (default ``"chief"``, as
            :class:`ReduceLROnPlateauSink`).

    Raises:
        ValueError: at construction for a ``schedule`` that cannot take ``(epoch, lr)``, an
            unknown ``per`` or ``every_n_steps`` with ``per="epoch"``; at ``begin`` for
            ``per="epoch"`` on a publisher without epochs, or a training publisher that offers
            no learning rate; when ``schedule`` returns anything but a finite number > 0 (the
            first call is made before step 1).
    """

    def __init__(
        self,
        schedule: Callable[[int, float], float],
        per: str = "epoch",
        *,
        every_n_steps: int | None = None,
        name: str | None = None,
        runs_on: str | None = None,
    ) -> None:
        if per not in ("epoch", "step"):
            raise ValueError(f"per must be 'epoch' or 'step' (got {per!r})")
        if per == "epoch" and every_n_steps is not None:
            raise ValueError(
                f"every_n_steps applies to per='step' (got every_n_steps={every_n_steps!r} with per='epoch')"
            )
        _check_schedule(schedule)
        keys = LEARNING_RATE_KEY if per == "step" else None
        super().__init__(keys=keys, every_n_steps=every_n_steps, name=name, runs_on=runs_on)
        if per == "epoch":
            self.schedule = Schedule()  # never due on a step: epoch events are unscheduled
        self.rate_schedule = schedule
        self.per = per
        self._start_clean()

    def _start_clean(self) -> None:
        self._steering = RateSteering(self.name)

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        self._start_clean()

    @property
    def receives_epochs(self) -> bool:
        return self.per == "epoch"

    def on_begin(self, event: Event) -> None:
        if event.mode != "train":
            return
        self._steering.require(self.context)
        if self.per == "epoch" and not self.context.model().ends_epochs():
            raise ValueError(
                f"{self.name}: per='epoch' needs a publisher that trains in epochs (EventBusCallback under "
                "Keras fit); this one counts steps: pass per='step' (schedule(step, lr))"
            )

    def on_session_created(self, event: Event) -> None:
        if event.mode != "train":
            return
        if not event.restored:
            self._start_clean_keeping_rate()
            self._set(0 if self.per == "epoch" else event.step)
        elif self.per == "step":
            self._set(event.step)  # the saved state, loaded next, puts back what it had set

    def _start_clean_keeping_rate(self) -> None:
        rate = self._steering.rate
        self._start_clean()
        self._steering.rate = rate

    def on_after_run(self, event: Event) -> None:
        if self.per == "epoch":
            if event.mode == "epoch":
                following = int(event.values["epoch"]) + 1
                progress = self.context.model().progress()
                if progress is None or following < progress.epochs:  # as Keras's: only for an epoch that trains
                    self._set(following)
        elif event.mode == "train":
            self._set(event.step)

    def _set(self, index: int) -> None:
        lr = self._steering.require(self.context)
        current, _ = self._steering.in_effect(lr)
        new = self.rate_schedule(index, current)
        number = isinstance(new, int | float | np.floating) and not isinstance(new, bool)
        if not number or not math.isfinite(new) or new <= 0:
            raise ValueError(
                f"{self.name}: schedule({index}, {current:.6g}) returned {new!r}; it must return the learning "
                f"rate for {self.per} {index}, a finite number > 0"
            )
        if not same_rate(float(new), current):
            self._steering.ask(lr, float(new), f"schedule at {self.per} {index}")

    def state_dict(self) -> dict[str, Any]:
        return self._steering.state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._steering.put_back(state, f"{self.name}: the rate in effect at the checkpoint")

    def status(self) -> str | None:
        return self._steering.last_change


def _check_schedule(schedule: object) -> None:
    """Fail at construction for a schedule that cannot be called as ``schedule(epoch, lr)``."""
    if not callable(schedule):
        raise ValueError(f"schedule must be a function (epoch or step, lr) -> lr (got {schedule!r})")
    try:
        inspect.signature(schedule).bind(0, 0.1)
    except TypeError as error:
        raise ValueError(
            f"schedule must take two arguments, (epoch or step, lr), and return the new rate ({error}); "
            "for a function of the epoch alone write lambda epoch, lr: f(epoch)"
        ) from None
    except ValueError:  # a builtin without a signature: it is called as it is
        return
