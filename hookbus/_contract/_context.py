"""What a sink may use of its bus: a narrow context, given to :meth:`Sink.setup` as a run begins.

Events are data; they do not carry the bus. A sink that needs more than an event — the clock,
the keys the publishers provide, checkpointing, a way to defer work until an event has
reached everyone — finds it here, and nothing else: never the bus itself, never another sink.
Cooperation between sinks goes through the :class:`hookbus.sink_api.Sink` interface (flush, state,
vetoes, status lines), which the bus runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hookbus._contract._learning_rate import HOW_TO_OFFER

if TYPE_CHECKING:
    from hookbus._contract._checkpoint_seam import Checkpoints
    from hookbus._contract._cluster import Task
    from hookbus._contract._events import ModelExported
    from hookbus._contract._learning_rate import LearningRate
    from hookbus._contract._model import ModelView
    from hookbus._contract._profiling import Profiler
    from hookbus._contract._schedule import Schedule
    from hookbus._contract._stats import BusStats

__all__ = ["PeerReport", "SinkContext", "require_learning_rate"]


@dataclass(frozen=True)
class PeerReport:
    """Another sink's public report, for dashboards: its name, status line and planned last step."""

    name: str
    status: str | None
    total_steps: int | None


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
        stats: Every subscriber's health (:meth:`hookbus.EventBus.stats`), for dashboards.
        learning_rate: The training publisher's :class:`~hookbus.sink_api.LearningRate` (read it,
            request a new one), ``None`` where no publisher offers one (:func:`require_learning_rate`
            fails naming what to pass).
        profiler: Profiling (:class:`hookbus.sink_api.Profiler`): windows of global steps traced
            by the training publisher's profiler, each step with its step marker, for
            :class:`~hookbus.sinks.ProfilerSink`.
        model: The training publisher's :class:`~hookbus.sink_api.ModelView`, asked when needed
            (it follows the publisher): its weights in memory, its export for serving, its
            variables, graph, configuration and summary, the training's parameters, which way a
            metric goes, whether it ends epochs and where it is in them. Every member answers
            "not offered" where the publisher cannot answer it, or while none offers a view
            (before it began, after it ended).
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
    stats: Callable[[], BusStats]
    learning_rate: Callable[[], LearningRate | None]
    profiler: Profiler
    model: Callable[[], ModelView]
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
