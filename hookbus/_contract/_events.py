"""Immutable payloads carried by the bus's signals."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from hookbus._rules._validate import one_of

__all__ = [
    "SIGNAL_DOCS",
    "WAIT_STATES",
    "CheckpointSaved",
    "Event",
    "ExceptionRaised",
    "ModelExported",
    "StopRequest",
    "SubscriberError",
    "WaitForStep",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})

#: Each signal's blinker ``doc=``: what it means and its payload.
SIGNAL_DOCS = {
    "begin": "A publisher began (graph built, before any session). Payload: event=Event.",
    "after_create_session": "A session was created. Payload: event=Event(step).",
    "session_created": "A (re)created session is a resume point. Payload: event=Event(step, restored).",
    "waiting_for_step": "A worker waits for a global step before training (start gate). Payload: event=WaitForStep.",
    "before_run": "A due training step is about to run. Payload: event=Event(step=expected step).",
    "after_run": "A due step ran, or an evaluation finished. Payload: event=Event(step, mode, values).",
    "end": "A publisher ended cleanly. Payload: event=Event(step).",
    "stop_requested": "A subscriber or a signal asked to stop. Payload: event=StopRequest.",
    "subscriber_error": "A subscriber raised. Payload: event=SubscriberError.",
    "exception": "Training raised; subscribers are closed next. Payload: event=ExceptionRaised.",
    "checkpoint_saving": (
        "A checkpoint is about to be saved, before the barrier (CheckpointSaverListener.before_save). "
        "Payload: event=CheckpointSaved(the path it is saved at, step, value)."
    ),
    "checkpoint_saved": "A checkpoint became visible. Payload: event=CheckpointSaved.",
    "learning_rate_changed": "A new learning rate was applied. Payload: event=LearningRateChange.",
    "model_exported": "An export for serving moved into place (ExportSink). Payload: event=ModelExported.",
    "system": (
        "A sample of the machine, delivered every time on the bus's sampler thread (never the training "
        "thread), every system_metrics seconds and once as the run closes. "
        "Payload: event=Event(step=the latest training step, mode='system', values={'system/...': float})."
    ),
}


@dataclass(frozen=True, init=False)
class Event:
    """A lifecycle or step event.

    Attributes:
        signal: The signal's name (``"after_run"``, ``"begin"``, ...).
        step: Completed training steps: the global step after the run. In eval and test mode,
            the training step being evaluated.
        mode: ``"train"``, ``"eval"`` (an evaluation of training: fit's validation, an eval
            hook's), ``"test"`` (a test evaluation: Keras's ``model.evaluate`` outside ``fit``),
            ``"epoch"`` (a Keras epoch's logs) or ``"system"`` (a sample of the machine, on the
            ``system`` signal).
        values: Read-only mapping of the keys fetched for this event (eval keys carry the
            ``eval/`` prefix, test keys ``test/``). Scalars are floats, arrays numpy arrays, bytes stay bytes.
        wall_time: ``time.time()`` when the event was made.
        elapsed: Seconds since the run (``with bus:``) or the first publisher began.
        restored: For ``session_created``: whether the session started from saved state
            (a checkpoint, or a re-creation after a recoverable error).
        rewound: For ``session_created``: whether the step went back behind what this run had
            already published (a re-creation after a recoverable error): state that sinks hold
            in memory for later steps is stale and must come from the checkpoint. A session
            that restores the checkpoint the previous session of the same run ended with (the
            train/evaluate loop) is restored but not rewound.
        final: True for the event published at the end for ``at_end`` subscribers.
        task_type: In multi-worker training, this process's job (``"worker"``, ``"chief"``);
            ``None`` (default) on one machine.
        task_index: Its index in the job; ``None`` (default) on one machine.
        local_step: In multi-worker training, the training runs this worker made in this run.
            ``step`` stays the shared global step (all workers advance it; every sink keys its
            rows, summaries and checkpoints by ``step``). ``None`` (default) on one machine.
        examples: On a training step's ``after_run``: the examples this publisher trained since its
            session began, through this step (``None``: the batch size is not known; see each
            publisher's ``batch_size``). Examples per second over a span are the difference of two
            events' counts over the time between them, as steps per second are of their steps: a
            short last batch counts what it holds.
        outside_secs: On a training step's ``after_run``: the seconds this publisher's training
            thread spent outside the framework's steps since its session began, up to this step's
            start (the loop around the step, other callbacks, hookbus's subscribers); over a span,
            its difference over the steps between is the time outside per step. Measured where the
            publisher already reads the clock, on due steps (see
            :class:`hookbus.publisher_api.PublisherCore`'s ``throughput``); ``None`` elsewhere.

    An event is data: it does not carry the bus. The bus that makes it gives it the one thing
    :meth:`request_stop` needs.
    """

    signal: str
    step: int
    mode: str = "train"
    values: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    wall_time: float = 0.0
    elapsed: float = 0.0
    restored: bool = False
    rewound: bool = False
    final: bool = False
    task_type: str | None = None
    task_index: int | None = None
    local_step: int | None = None
    examples: int | None = None
    outside_secs: float | None = None
    _stop: Callable[[str, int], None] | None = field(default=None, repr=False, compare=False)

    def __init__(
        self,
        signal: str,
        step: int,
        mode: str = "train",
        values: Mapping[str, Any] = _EMPTY,
        wall_time: float = 0.0,
        elapsed: float = 0.0,
        restored: bool = False,
        rewound: bool = False,
        final: bool = False,
        task_type: str | None = None,
        task_index: int | None = None,
        local_step: int | None = None,
        examples: int | None = None,
        outside_secs: float | None = None,
        _stop: Callable[[str, int], None] | None = None,
    ) -> None:
        # One per due step: the fields in one write, where a frozen dataclass's own __init__ makes
        # one object.__setattr__ call per field (2.4 of a due step's ~5 us). Still frozen after it.
        object.__setattr__(
            self,
            "__dict__",
            {
                "signal": signal,
                "step": step,
                "mode": mode,
                "values": values,
                "wall_time": wall_time,
                "elapsed": elapsed,
                "restored": restored,
                "rewound": rewound,
                "final": final,
                "task_type": task_type,
                "task_index": task_index,
                "local_step": local_step,
                "examples": examples,
                "outside_secs": outside_secs,
                "_stop": _stop,
            },
        )

    def request_stop(self, reason: str) -> None:
        """Ask the publisher to stop training at the end of this step.

        Args:
            reason: Why; it becomes ``bus.stop_reason`` (the first reason of a run is kept).
        """
        if self._stop is None:
            raise RuntimeError("this event is not attached to a bus; nothing can be stopped")
        self._stop(reason, self.step)


@dataclass(frozen=True)
class StopRequest:
    """Payload of ``stop_requested``: who asked to stop, why, and at which step."""

    reason: str
    source: str
    step: int
    wall_time: float


@dataclass(frozen=True)
class SubscriberError:
    """Payload of ``subscriber_error``: a subscriber raised while handling a signal.

    Attributes:
        subscriber: The subscriber's name.
        signal: The signal it was handling, or ``"flush"`` when it could not flush for a
            checkpoint (it is then disabled for the rest of the run).
        step: The step of the event.
        error: The exception.
        count: How many times this subscriber has failed in this run.
        policy: Its ``on_error`` policy (``"isolate"``, ``"disable"`` or ``"raise"``).
    """

    subscriber: str
    signal: str
    step: int
    error: BaseException
    count: int
    policy: str


@dataclass(frozen=True)
class ExceptionRaised:
    """Payload of ``exception``: training raised; every subscriber is closed next."""

    error: BaseException
    step: int


@dataclass(frozen=True)
class CheckpointSaved:
    """Payload of ``checkpoint_saved``: a checkpoint became visible; and of ``checkpoint_saving``:
    one is about to be saved.

    Attributes:
        path: The checkpoint prefix (what ``tf.train.latest_checkpoint`` returns); for
            ``checkpoint_saving``, the prefix it is saved at (under parameter servers the saved one
            is renamed after the step it holds, which ``checkpoint_saved`` then carries).
        step: The step it holds.
        value: The monitored value at that step, if a monitor is set.
    """

    path: str
    step: int
    value: float | None = None


@dataclass(frozen=True)
class ModelExported:
    """Payload of ``model_exported``: an export for serving moved into place, at the checkpoint
    barrier or a session's end (:class:`~hookbus.sinks.ExportSink`), for a sink that ships it on
    (``MLflowSink(log_model=True)``).

    Attributes:
        path: Where it is: a ``.keras`` file or a SavedModel directory. It may be deleted later
            (an export beyond ``keep``, a resume before its step): a sink that keeps it copies it.
        step: The step whose model it is.
        kind: What it is, in words (``"a .keras file"``, ``"a SavedModel"``).
    """

    path: str
    step: int
    kind: str


#: What a :class:`WaitForStep` says, in the order a wait goes through them.
WAIT_STATES = ("waiting", "reached", "timed_out", "stopped")


@dataclass(frozen=True)
class WaitForStep:
    """Payload of ``waiting_for_step``: a worker's start gate (``EventBusHook(wait_for_step=N)``).

    Published as the wait begins and every few seconds while it lasts (``state="waiting"``),
    then once with how it ended; a worker that finds the step already reached publishes nothing.

    Attributes:
        state: ``"waiting"``; ``"reached"`` (the global step got to ``until_step``);
            ``"timed_out"`` (``timeout_secs`` passed first); ``"stopped"`` (a stop came first:
            the cluster's stop flag, a signal, another thread).
        until_step: The global step the worker waits for.
        step: The global step read last.
        waited_secs: Seconds waited so far.
        timeout_secs: The longest wait, or ``None`` (as long as it takes).
        starts: Whether training starts now: reached, or timed out with ``on_timeout="start"``.
        wall_time: ``time.time()`` when it was published.
    """

    state: str
    until_step: int
    step: int
    waited_secs: float
    timeout_secs: float | None
    starts: bool
    wall_time: float

    def __post_init__(self) -> None:
        one_of("state", self.state, WAIT_STATES)
