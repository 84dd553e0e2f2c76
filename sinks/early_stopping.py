"""EarlyStoppingSink: stop when a monitored value stops improving (keras.callbacks.EarlyStopping's rule)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from hookbus.sink_api import EPOCH_PREFIX, EVAL_PREFIX, Priority, Sink
from hookbus.validate import finite_number, flag, non_negative_int

from ._monitor import Monitor, check_scalar

if TYPE_CHECKING:
    from hookbus.sink_api import Event, SinkContext

__all__ = ["Decision", "EarlyStopRule", "EarlyStopState", "EarlyStoppingSink", "decide"]

logger = logging.getLogger("hookbus")


@dataclass(frozen=True)
class EarlyStopState:
    """What early stopping remembers between evaluations (saved with each checkpoint)."""

    best: float | None = None
    best_step: int | None = None
    wait: int = 0
    seen: int = 0


@dataclass(frozen=True)
class EarlyStopRule:
    """The settings of :func:`decide` (see :class:`EarlyStoppingSink` for their meaning)."""

    monitor: Monitor
    patience: int = 0
    baseline: float | None = None
    stop_above: float | None = None
    stop_below: float | None = None
    stop_on_nonfinite: bool = True
    min_steps: int = 0


class Decision(NamedTuple):
    """The outcome of one evaluation: the new state, whether to stop, and why."""

    state: EarlyStopState
    should_stop: bool
    reason: str | None


def decide(rule: EarlyStopRule, state: EarlyStopState, value: float, step: int) -> Decision:
    """Decide on one evaluation of ``value`` at ``step``; pure.

    Without thresholds and for finite values this is Keras's ``EarlyStopping.on_epoch_end``,
    quirks included: ``wait`` grows before the comparison, the first value is always the best,
    a value that beats the best but not ``baseline`` keeps ``wait`` growing, and only a
    non-improving evaluation other than the first can stop.
    """
    if step < rule.min_steps:
        return Decision(state, False, None)
    key = rule.monitor.key
    seen = state.seen + 1  # states are built directly: dataclasses.replace costs microseconds a call
    counted = EarlyStopState(state.best, state.best_step, state.wait, seen)
    if rule.stop_on_nonfinite and not math.isfinite(value):
        return Decision(counted, True, f"{key} is {value} at step {step}")
    if rule.stop_above is not None and value > rule.stop_above:
        return Decision(counted, True, f"{key} {value:.6g} > stop_above {rule.stop_above:.6g} at step {step}")
    if rule.stop_below is not None and value < rule.stop_below:
        return Decision(counted, True, f"{key} {value:.6g} < stop_below {rule.stop_below:.6g} at step {step}")
    wait = state.wait + 1
    if rule.monitor.is_improvement(value, state.best):
        # Keras restarts the count only when the value also beats the baseline.
        beats_baseline = rule.baseline is None or rule.monitor.is_improvement(value, rule.baseline)
        return Decision(EarlyStopState(value, step, 0 if beats_baseline else wait, seen), False, None)
    counted = EarlyStopState(state.best, state.best_step, wait, seen)
    if wait >= rule.patience and state.seen > 0:
        reason = (
            f"early stopping: {key} did not improve on {state.best:.6g} (step {state.best_step}) "
            f"for {wait} evaluation{'s' if wait != 1 else ''} (patience {rule.patience})"
        )
        return Decision(counted, True, reason)
    return Decision(counted, False, None)


class EarlyStoppingSink(Sink):
    """Stops the run when ``monitor`` stops improving, or crosses a threshold.

    Every event carrying ``monitor`` that this sink receives is one evaluation: each evaluation
    of an eval publisher (``"eval/loss"``), or each due step for a training key (set
    ``every_n_steps``; the default is every step). The rule is :func:`decide`, which agrees with
    ``keras.callbacks.EarlyStopping`` on patience, min_delta, baseline and mode. The stop reason
    becomes ``bus.stop_reason``; best, wait and the evaluation count are saved with each
    checkpoint and restored on resume.

    A monitor that comes from evaluations or epochs (``eval/...``, ``epoch/...``) and has not
    come by the end of an epoch of Keras ``fit`` (a ``fit`` without ``validation_data``) is
    reported once, with the epoch's keys: early stopping decides nothing without it (Keras warns
    each epoch).

    Args:
        monitor: The key to watch.
        mode: ``"auto"`` (default, as Keras's), ``"min"`` or ``"max"``. ``auto`` is the one
            direction rule (:func:`hookbus.sink_api.better_direction`, the dashboard's too),
            settled as the run begins: the direction a Keras compiled metric declares, else the
            name (``*loss*``, ``*error*``, ``*mae*``, ...: min; ``*acc*``, ``*auc*``, ...: max).
            Where nothing tells (``eval/foo``), ``begin`` fails asking for ``mode=``.
        patience: Evaluations without improvement before stopping (default 0).
        min_delta: Change smaller than this is no improvement (default 0.0).
        baseline: Also restart the patience count only on values beating it (default ``None``).
        stop_above: Stop at once when the value exceeds this (default ``None``).
        stop_below: Stop at once when the value falls below this (default ``None``).
        stop_on_nonfinite: Stop at once on NaN or inf (default ``True``).
        min_steps: Ignore evaluations before this training step (default 0).
        restore_best: At the end of training, put back the model's weights from the best
            evaluation by this rule (``min_delta`` and ``baseline`` included), as Keras's
            ``EarlyStopping(restore_best_weights=True)`` does, also when the run ends without an
            early stop. Weights only, kept in memory: the optimizer's state and the step stay,
            the final checkpoint is saved before the weights go back and the checkpoint pointer
            never moves back, so a resume continues where training ended. Needs a publisher
            holding its model (:class:`~hookbus.EventBusCallback`,
            ``LoopPublisher(weights=...)``); no checkpoint sink is needed. After a restart, the
            best weights come from memory when the best evaluation happened in this process,
            else from a checkpoint of the best step that a checkpoint sink still keeps (read
            weights only; the Keras callback's checkpoints); without one a warning says so and
            the last weights stay (default ``False``).
        every_n_steps: The schedule for training keys (default every step).
        every_n_secs: With ``every_n_steps``, above.
        name: Name in reports and in checkpoint state (default the class name).

    Raises:
        ValueError: at construction for invalid settings; at ``begin`` when ``mode="auto"``
            cannot tell the direction, ``restore_best`` has no publisher holding a model, no
            publisher provides ``monitor``, or a publisher
            declares it with a non-scalar shape; at the first value of ``monitor`` that is not a
            scalar number (``stop_below >= stop_above`` fails at construction).
    """

    priority = Priority.EARLY_STOPPING
    controls_training: ClassVar[bool] = True
    on_error = "raise"

    def __init__(
        self,
        monitor: str,
        mode: str = "auto",
        patience: int = 0,
        min_delta: float = 0.0,
        baseline: float | None = None,
        stop_above: float | None = None,
        stop_below: float | None = None,
        stop_on_nonfinite: bool = True,
        min_steps: int = 0,
        restore_best: bool = False,
        *,
        every_n_steps: int | None = None,
        every_n_secs: float | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"monitor must be a non-empty key (got {monitor!r})")
        flag("stop_on_nonfinite", stop_on_nonfinite)
        flag("restore_best", restore_best)
        super().__init__(keys=monitor, every_n_steps=every_n_steps, every_n_secs=every_n_secs, name=name)
        self.rule = EarlyStopRule(
            monitor=Monitor(monitor, mode, finite_number("min_delta", min_delta) or 0.0),
            patience=non_negative_int("patience", patience),
            baseline=finite_number("baseline", baseline, allow_none=True),
            stop_above=finite_number("stop_above", stop_above, allow_none=True),
            stop_below=finite_number("stop_below", stop_below, allow_none=True),
            stop_on_nonfinite=stop_on_nonfinite,
            min_steps=non_negative_int("min_steps", min_steps),
        )
        above, below = self.rule.stop_above, self.rule.stop_below
        if above is not None and below is not None and below >= above:
            raise ValueError(
                f"stop_below ({below:g}) must be less than stop_above ({above:g}): with these every "
                "value stops the run at once"
            )
        self.restore_best = restore_best
        self._start_clean()

    def _start_clean(self) -> None:
        self.state = EarlyStopState()
        self.stopped_at: int | None = None
        self.stop_reason: str | None = None  # saved with checkpoints: a resumed run stops again
        self._best_weights: object = None  # the weights at state.best_step (restore_best)
        self._best_weights_step: int | None = None
        self._resumed: Event | None = None  # the session_created being dispatched, until a step runs
        self._arrived = False  # whether the monitor came in this run (else an epoch end reports it once)

    @property
    def monitor(self) -> str:
        return self.rule.monitor.key

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        self._start_clean()  # a new run: best and wait come back only from a checkpoint

    @property
    def receives_epochs(self) -> bool:
        """Epoch events let it report a monitor that an epoch ended without (evaluation and
        epoch keys; a training key comes on its schedule)."""
        return self.monitor.startswith((EVAL_PREFIX, EPOCH_PREFIX))

    def on_begin(self, event: Event) -> None:
        # Settled once (the first begin; the Keras callback declares its metrics' directions then).
        self.rule = replace(self.rule, monitor=self.rule.monitor.settled(self.name, self.context.model().direction))
        check_scalar(self.name, self.monitor, self.context.static_shape(self.monitor))
        if self.restore_best and event.mode == "train" and self.context.model().weights() is None:
            raise ValueError(
                f"{self.name}: restore_best=True puts the best weights back into the live model, and "
                "this training publisher holds none (a MonitoredTrainingSession closes its session at "
                "the end); use EventBusCallback or LoopPublisher(weights=...), or keep the best "
                f"checkpoints with CheckpointSink(keep_best=1, monitor={self.monitor!r})"
            )

    def on_session_created(self, event: Event) -> None:
        if event.mode != "train":
            return
        if not event.restored:
            self._start_clean()  # a model that is not a checkpoint's: nothing to carry over
            return
        # The checkpoint sink, which runs after this sink, may load the saved state next
        # (load_state_dict); the resume is judged on the state as it is then.
        self._resumed = event
        self._judge_resume(loaded=False)

    def _judge_resume(self, *, loaded: bool) -> None:
        event = self._resumed
        if event is None:
            return
        best_step = self.state.best_step
        if self.restore_best and best_step is not None and self._best_weights_step != best_step:
            if best_step == event.step:
                self._keep_best_weights(best_step)  # the checkpoint resumed from holds the best weights
            else:
                self._read_best_weights(best_step)
        reason = self.stop_reason
        if loaded and reason is not None and self.state.wait >= self.rule.patience and self.stopped_at != event.step:
            # Patience ran out before the checkpoint: stop again before training another step.
            self.stopped_at = event.step
            event.request_stop(f"{reason} (before the restart)")

    def on_after_run(self, event: Event) -> None:
        self._resumed = None
        value = self.rule.monitor.value(event.values)
        if value is None:
            if event.mode == "epoch" and not self._arrived:
                self._report_missing(event)
            return
        self._arrived = True
        before = self.state
        self.state, should_stop, reason = decide(self.rule, before, value, event.step)
        if self.restore_best and self.state.best_step != before.best_step and self.state.best_step is not None:
            self._keep_best_weights(self.state.best_step)
        if should_stop and reason is not None:
            self.stopped_at, self.stop_reason = event.step, reason
            event.request_stop(reason)

    def _report_missing(self, event: Event) -> None:
        """Once a run: an epoch ended and the monitor has not come (Keras warns each epoch)."""
        self._arrived = True  # reported: once
        hint = (
            "evaluation keys come from fit's validation (fit(validation_data=...) or validation_split=...); "
            if self.monitor.startswith(EVAL_PREFIX)
            else ""
        )
        logger.warning(
            "%s: epoch %d ended without %r, so early stopping has decided nothing yet; %sthe epoch's keys are %s",
            self.name,
            int(event.values.get("epoch", -1)) + 1,
            self.monitor,
            hint,
            sorted(k for k in event.values if k.startswith(EPOCH_PREFIX)),
        )

    def _read_best_weights(self, step: int) -> None:
        """After a restart: the best step's weights from its checkpoint, if one is still kept."""
        weights, prefix = self.context.model().weights(), self.context.checkpoints.find(step)
        if weights is not None and prefix is not None:
            held = weights.read(prefix)
            if held is not None:
                self._best_weights, self._best_weights_step = held, step

    def _keep_best_weights(self, step: int) -> None:
        weights = self.context.model().weights()
        if weights is not None:
            self._best_weights, self._best_weights_step = weights.snapshot(), step

    def on_end(self, event: Event) -> None:
        self._resumed = None
        if self.restore_best and event.mode == "train" and self.state.best_step is not None:
            # Deferred twice: after the checkpoint sink's own deferred final save, which must
            # hold the weights training ended with.
            self.context.defer(lambda: self.context.defer(self._restore_best_weights))

    def _restore_best_weights(self) -> None:
        weights, best_step = self.context.model().weights(), self.state.best_step
        if weights is None or best_step is None:
            return
        if self._best_weights_step != best_step:
            logger.warning(
                "%s: the best weights (step %d) were not kept across the restart and no checkpoint of that "
                "step is left to read them from; the model keeps its last weights",
                self.name,
                best_step,
            )
            return
        weights.restore(self._best_weights)
        logger.info("%s: restored the model's weights from step %d", self.name, best_step)

    def state_dict(self) -> dict[str, Any]:
        s = self.state
        return {
            "best": s.best,
            "best_step": s.best_step,
            "wait": s.wait,
            "seen": s.seen,
            "stop_reason": self.stop_reason,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        best = state.get("best")
        best_step = state.get("best_step")
        self.state = EarlyStopState(
            best=None if best is None else float(best),
            best_step=None if best_step is None else int(best_step),
            wait=int(state.get("wait", 0)),
            seen=int(state.get("seen", 0)),
        )
        reason = state.get("stop_reason")
        self.stop_reason = reason if isinstance(reason, str) else None
        self._judge_resume(loaded=True)

    def status(self) -> str:
        s = self.state
        best = "none yet" if s.best is None else f"best {s.best:.6g} @ {s.best_step}"
        return f"early stop: patience {s.wait}/{self.rule.patience} ({best})"
