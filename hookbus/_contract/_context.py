"""What a sink may use of its bus: a narrow context, given to :meth:`Sink.setup` as a run begins.

Events are data; they do not carry the bus. A sink that needs more than an event — the clock,
the keys the publishers provide, checkpointing, a way to defer work until an event has
reached everyone — finds it here, and nothing else: never the bus itself, never another sink.
Cooperation between sinks goes through the :class:`hookbus.sink_api.Sink` interface (flush, state,
vetoes, status lines), which the bus runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hookbus._contract._learning_rate import HOW_TO_OFFER

if TYPE_CHECKING:
    from hookbus._contract._checkpoint_seam import Checkpoints
    from hookbus._contract._cluster import Task
    from hookbus._contract._events import ModelExported
    from hookbus._contract._learning_rate import LearningRate
    from hookbus._contract._model import ModelExport
    from hookbus._contract._profiling import Profiler
    from hookbus._contract._schedule import Schedule
    from hookbus._contract._stats import BusStats
    from hookbus._contract._weights import WeightsBackend

__all__ = ["EpochProgress", "PeerReport", "SinkContext", "require_learning_rate"]


@dataclass(frozen=True)
class PeerReport:
    """Another sink's public report, for dashboards: its name, status line and planned last step."""

    name: str
    status: str | None
    total_steps: int | None


@dataclass(frozen=True)
class EpochProgress:
    """Where a publisher that trains in epochs is (Keras ``fit``), for dashboards.

    Attributes:
        epoch: The epoch being trained, counted from 1 (Keras's progress bar: ``Epoch 3/12``).
        epochs: The epochs the training runs to (``fit(epochs=...)``).
        steps_per_epoch: Training steps per epoch; ``None`` when the input's length is unknown.
        epoch_start: The step this epoch began at; ``None``: ``(epoch - 1) × steps_per_epoch``, a
            ``fit`` that began at step 0 with its first epoch. A second ``fit`` of a model in memory
            begins where the first left ``iterations``, one given ``initial_epoch`` at step 0.
    """

    epoch: int
    epochs: int
    steps_per_epoch: int | None
    epoch_start: int | None = None

    @property
    def total_steps(self) -> int | None:
        """The step training ends at, the epoch's start plus its and the later epochs' steps
        (``epochs × steps_per_epoch`` for a ``fit`` from step 0); ``None`` when not known."""
        per_epoch = self.steps_per_epoch
        if per_epoch is None:
            return None
        start = (self.epoch - 1) * per_epoch if self.epoch_start is None else self.epoch_start
        return start + (self.epochs - self.epoch + 1) * per_epoch


@dataclass(frozen=True)
class SinkContext:
    """What the bus offers one sink for one run.

    Attributes:
        clock: The bus's monotonic clock (seconds).
        task: This process's :class:`hookbus.Task` in multi-worker training, ``None`` on one machine.
        known_keys: Every key the bus's publishers provide (eval keys with their ``eval/`` prefix).
        static_shape: ``key -> shape`` a publisher declared before step 1 (``()``: a scalar), or ``None``.
        current_step: The training step the bus has reached (the last step published or passed).
        defer: Run a function once the event being dispatched has reached every subscriber
            (at once outside a dispatch): a checkpoint saves after the writers received the step.
        reschedule: Give this sink a new schedule, counted from the current step.
        peers: The other sinks' reports (status line, planned last step), in dispatch order.
        checkpoints: Checkpointing (:class:`hookbus.sink_api.Checkpoints`): the barrier, the pointer and
            the publisher's checkpoint store, for :class:`~hookbus.sinks.CheckpointSink` and the
            sinks that read a checkpoint (early stopping's best weights after a restart).
        model_weights: The training publisher's way to take and put back its model's weights in
            memory (``snapshot()`` / ``restore(snapshot)``), ``None`` where it holds no model
            (the TF1 hook, whose session closes at the end) or before it began.
        graph_def: The training graph as a serialized ``GraphDef``, where the publisher has one
            (the TF1 hook), else ``None``: what TensorBoard's graph tab shows.
        model_config: The Keras model's JSON configuration (the Keras callback, for Sequential
            and functional models, as Keras's ``TensorBoard`` writes it), else ``None``.
        stats: Every subscriber's health (:meth:`hookbus.EventBus.stats`), for dashboards.
        declared_direction: ``key -> "min" | "max" | None``: which way the metric behind ``key``
            goes, where the training publisher knows it (a Keras compiled metric's own
            direction), else ``None``; monitors' ``mode="auto"`` asks it first.
        ends_epochs: Whether the training publisher ends epochs (Keras ``fit``), so that sinks'
            defaults follow Keras's.
        progress: The training publisher's :class:`EpochProgress` while it trains in epochs
            (the Keras callback, from the first epoch's start to the end of ``fit``), else ``None``.
        learning_rate: The training publisher's :class:`~hookbus.sink_api.LearningRate` (read it,
            request a new one), ``None`` where no publisher offers one (:func:`require_learning_rate`
            fails naming what to pass).
        profiler: Profiling (:class:`hookbus.sink_api.Profiler`): windows of global steps traced
            by the training publisher's profiler, each step with its step marker, for
            :class:`~hookbus.sinks.ProfilerSink`.
        training_params: The training's own parameters where the training publisher knows them
            (under Keras ``fit``: ``epochs``, ``steps_per_epoch`` and the optimizer's configuration
            as ``optimizer_<name>``, what MLflow's Keras callback logs), else ``None``; for trackers.
        variables: The training model's variables now, name to NumPy array (Keras's weight
            paths under ``fit``, the graph's trainable variables under the TF1 hook, the
            ``weights=`` a loop gives), else ``None``: TensorBoard's histograms. Reads them (a
            device-to-host copy): call it only when writing.
        model_summary: The model's summary as text, Keras's ``model.summary()`` (the Keras
            callback), else ``None``: what MLflow's Keras callback logs as ``model_summary.txt``.
        model_export: The training publisher's :class:`~hookbus.sink_api.ModelExport` (writes
            the model for serving), ``None`` where it offers none or before it began.
        announce_export: Publish ``model_exported`` (an export moved into place), for the sink
            that exports (:class:`~hookbus.sinks.ExportSink`).
    """

    clock: Callable[[], float]
    task: Task | None
    known_keys: frozenset[str]
    static_shape: Callable[[str], tuple[int | None, ...] | None]
    current_step: Callable[[], int]
    defer: Callable[[Callable[[], None]], None]
    reschedule: Callable[[Schedule], None]
    peers: Callable[[], list[PeerReport]]
    checkpoints: Checkpoints
    model_weights: Callable[[], WeightsBackend | None]
    graph_def: Callable[[], bytes | None]
    model_config: Callable[[], str | None]
    stats: Callable[[], BusStats]
    declared_direction: Callable[[str], str | None]
    ends_epochs: Callable[[], bool]
    progress: Callable[[], EpochProgress | None]
    learning_rate: Callable[[], LearningRate | None]
    profiler: Profiler
    training_params: Callable[[], Mapping[str, Any] | None]
    variables: Callable[[], Mapping[str, Any] | None]
    model_summary: Callable[[], str | None]
    model_export: Callable[[], ModelExport | None]
    announce_export: Callable[[ModelExported], None]


def require_learning_rate(context: SinkContext, who: str) -> LearningRate:
    """The run's :class:`~hookbus.sink_api.LearningRate` from a sink's ``context``, for a sink
    that steers it; fails before step 1 without one.

    Args:
        context: The sink's context (given to :meth:`~hookbus.sink_api.Sink.setup`).
        who: Names the sink in the message (e.g. ``"ReduceLROnPlateauSink"``).

    Raises:
        ValueError: when no training publisher of the bus offers a rate, naming what to pass.
    """
    rate = context.learning_rate()
    if rate is None:
        raise ValueError(
            f"{who} needs a learning rate, and no training publisher of the bus offers one; pass {HOW_TO_OFFER}"
        )
    rate.steered = True
    return rate
