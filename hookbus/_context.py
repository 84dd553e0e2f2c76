"""What a sink may use of its bus: a narrow context, given to :meth:`Sink.setup` as a run begins.

Events are data; they do not carry the bus. A sink that needs more than an event — the clock,
the keys the publishers provide, the checkpoint backend, a way to defer work until an event has
reached everyone — finds it here, and nothing else: never the bus itself, never another sink.
Cooperation between sinks goes through the :class:`hookbus.Sink` interface (flush, state,
vetoes, status lines), which the bus runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hookbus import _checkpoint as files
from hookbus._subscriber import Sink

if TYPE_CHECKING:
    from hookbus._barrier import PreparedCheckpoint
    from hookbus._bus import EventBus
    from hookbus._checkpoint import CheckpointBackend
    from hookbus._cluster import Task
    from hookbus._events import CheckpointSaved
    from hookbus._schedule import Schedule
    from hookbus._stats import BusStats
    from hookbus._weights import WeightsBackend

__all__ = ["EpochProgress", "PeerReport", "SinkContext", "SinkServices"]

logger = logging.getLogger("hookbus")


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
    """

    epoch: int
    epochs: int
    steps_per_epoch: int | None

    @property
    def total_steps(self) -> int | None:
        """The step training ends at, ``epochs × steps_per_epoch`` (``None`` when not known)."""
        return None if self.steps_per_epoch is None else self.epochs * self.steps_per_epoch


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
        checkpoint_backend: The training publisher's checkpoint backend, ``None`` before it began.
        prepare_checkpoint: The checkpoint barrier's prepare phase for a step (vetoes, flush,
            states); ``None`` when a control sink vetoes.
        commit_checkpoint: ``(prepared, prefix, value, taken)``: save the model through the
            publisher's backend and the states beside it; the prefix written (``None``: its step
            is in ``taken``).
        record_checkpoints: ``(directory, kept, dropped)``: the pointer names ``kept`` (latest
            last), then ``dropped`` are deleted.
        load_states: Give each sink its state saved beside a checkpoint (by sink name).
        check_state_names: Fail, naming them, if two sinks with state share a name (their states
            are saved by name).
        publish_checkpoint: Publish ``checkpoint_saved``.
        record_evaluated: ``prefix`` (a checkpoint of the current step) has been evaluated: flush,
            then write the sinks' states beside it again, marked ``evaluated``.
        model_weights: The training publisher's way to take and put back its model's weights in
            memory (``snapshot()`` / ``restore(snapshot)``), ``None`` where it holds no model
            (the TF1 hook, whose session closes at the end) or before it began.
        find_checkpoint: The prefix of a checkpoint of ``step`` that a checkpoint sink of this
            bus keeps in its directory, or ``None``.
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
    """

    clock: Callable[[], float]
    task: Task | None
    known_keys: frozenset[str]
    static_shape: Callable[[str], tuple[int | None, ...] | None]
    current_step: Callable[[], int]
    defer: Callable[[Callable[[], None]], None]
    reschedule: Callable[[Schedule], None]
    peers: Callable[[], list[PeerReport]]
    checkpoint_backend: Callable[[], CheckpointBackend | None]
    prepare_checkpoint: Callable[[int], PreparedCheckpoint | None]
    commit_checkpoint: Callable[[PreparedCheckpoint, str, float | None, Container[int]], str | None]
    record_checkpoints: Callable[[str, list[str], list[str]], None]
    load_states: Callable[[Mapping[str, Any]], None]
    check_state_names: Callable[[], None]
    publish_checkpoint: Callable[[CheckpointSaved], None]
    record_evaluated: Callable[[str], None]
    model_weights: Callable[[], WeightsBackend | None]
    find_checkpoint: Callable[[int], str | None]
    graph_def: Callable[[], bytes | None]
    model_config: Callable[[], str | None]
    stats: Callable[[], BusStats]
    declared_direction: Callable[[str], str | None]
    ends_epochs: Callable[[], bool]
    progress: Callable[[], EpochProgress | None]


class SinkServices:
    """Builds each sink's :class:`SinkContext` from its bus's parts, and serves what it offers."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus

    def context_for(self, sink: Sink) -> SinkContext:
        """The context the bus gives ``sink`` as a run begins."""
        barrier = self._bus._barrier
        return SinkContext(
            clock=self._bus.clock,
            task=self._bus.task,
            known_keys=self._bus._keys.known,
            static_shape=self._bus._keys.shape,
            current_step=lambda: self._bus._state.step,
            defer=self._bus._dispatcher.call_after_dispatch,
            reschedule=lambda schedule: self._bus._reschedule(sink, schedule),
            peers=lambda: self._peer_reports(sink),
            checkpoint_backend=lambda: self._bus._checkpoint_backend,
            prepare_checkpoint=barrier.prepare,
            commit_checkpoint=barrier.commit,
            record_checkpoints=barrier.record,
            load_states=self._load_states,
            check_state_names=self._check_state_names,
            publish_checkpoint=lambda saved: self._bus._dispatcher.publish("checkpoint_saved", saved),
            record_evaluated=barrier.record_evaluated,
            model_weights=lambda: self._bus._weights,
            find_checkpoint=self._find_checkpoint,
            graph_def=lambda: self._bus._graph_def() if self._bus._graph_def is not None else None,
            model_config=lambda: self._bus._model_config() if self._bus._model_config is not None else None,
            stats=self._bus.stats,
            declared_direction=lambda key: self._bus._directions(key) if self._bus._directions is not None else None,
            ends_epochs=lambda: self._bus._ends_epochs,
            progress=lambda: self._bus._progress() if self._bus._progress is not None else None,
        )

    def _peer_reports(self, asking: Sink) -> list[PeerReport]:
        reports = []
        for record in self._bus._here:
            sink = record.sink
            if sink is None or sink is asking:
                continue
            try:
                status, steps = sink.status(), sink.total_steps
            except Exception:  # one sink's report must not break another's display
                logger.debug("status of %r failed", sink, exc_info=True)
                continue
            reports.append(PeerReport(sink.name, status, steps if isinstance(steps, int) else None))
        return reports

    def _load_states(self, states: Mapping[str, Any]) -> None:
        state = self._bus._state
        for record in self._bus._here:
            if record.sink is not None and record.sink.name in states:
                # The sink's own work: a stop it asks for while loading is its request.
                previous, state.current = state.current, record
                try:
                    record.sink.load_state_dict(states[record.sink.name])
                finally:
                    state.current = previous

    def _find_checkpoint(self, step: int) -> str | None:
        for sink in self._bus.sinks:
            directory = sink.checkpoint_directory
            if directory is not None:
                held = [p for p in files.list_checkpoints(directory) if files.step_of(p) == step]
                if held:
                    return held[-1]
        return None

    def _check_state_names(self) -> None:
        seen: dict[str, Sink] = {}
        for sink in self._bus.sinks:
            if type(sink).state_dict is Sink.state_dict:
                continue
            if sink.name in seen:
                raise ValueError(
                    f"two sinks with state are named {sink.name!r} ({seen[sink.name]!r} and {sink!r}); "
                    "their states are saved by name: pass name=... to tell them apart"
                )
            seen[sink.name] = sink
