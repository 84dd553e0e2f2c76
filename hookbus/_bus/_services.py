"""Each sink's :class:`~hookbus.sink_api.SinkContext`, built from the bus's parts (never the bus itself),
and the bus's side of the checkpoint seam (:class:`~hookbus.sink_api.Checkpoints`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hookbus._checkpoints._store import step_of
from hookbus._contract._context import PeerReport, SinkContext
from hookbus._contract._events import CheckpointSaved
from hookbus._contract._sink import Sink

if TYPE_CHECKING:
    from collections.abc import Container, Iterable

    from hookbus._bus._barrier import Barrier
    from hookbus._bus._dispatch import Dispatcher
    from hookbus._bus._keys import KeyRegistry
    from hookbus._bus._offers import Offers
    from hookbus._bus._roster import Roster
    from hookbus._bus._state import RunState
    from hookbus._checkpoints._backend import CheckpointBackend
    from hookbus._checkpoints._store import CheckpointStore
    from hookbus._contract._profiling import Profiling
    from hookbus._contract._stats import BusStats

__all__ = ["BusCheckpoints", "SinkServices", "check_state_names"]

logger = logging.getLogger("hookbus")


class SinkServices:
    """Builds each sink's :class:`SinkContext` from the bus's parts, and serves what it offers.

    Args:
        roster: Who is subscribed (peers, states, checkpoint directories).
        keys: The publishers' keys.
        state: The run's progress (the current step).
        dispatcher: Delivery (deferred work, ``checkpoint_saved``, who is being called).
        barrier: The checkpoint barrier (behind the sinks' :class:`~hookbus.sink_api.Checkpoints`).
        offers: What the training publisher offers (checkpoints and their store, weights, graph,
            model config, metric directions, epochs).
        clock: The bus's monotonic clock.
        stats: Every subscriber's health (``bus.stats``).
        profiling: The bus's profiling seam (windows asked for, the publisher's profiler).
    """

    def __init__(
        self,
        *,
        roster: Roster,
        keys: KeyRegistry,
        state: RunState,
        dispatcher: Dispatcher,
        barrier: Barrier,
        offers: Offers,
        clock: Callable[[], float],
        stats: Callable[[], BusStats],
        profiling: Profiling,
    ) -> None:
        self._roster = roster
        self._keys = keys
        self._state = state
        self._dispatcher = dispatcher
        self._offers = offers
        self._clock = clock
        self._stats = stats
        self._profiling = profiling
        self._checkpoints = BusCheckpoints(
            barrier,
            offer=lambda: offers.checkpoints,
            sinks=lambda: roster.sinks,
            load_states=self._load_states,
            publish=lambda saved: dispatcher.publish("checkpoint_saved", saved),
            announce=lambda saving: dispatcher.publish("checkpoint_saving", saving),
        )

    def context_for(self, sink: Sink) -> SinkContext:
        """The context the bus gives ``sink`` as a run begins."""
        offers, state, roster = self._offers, self._state, self._roster
        return SinkContext(
            clock=self._clock,
            task=roster.task,
            known_keys=self._keys.known,
            static_shape=self._keys.shape,
            current_step=lambda: state.step,
            defer=self._dispatcher.call_after_dispatch,
            reschedule=lambda schedule: roster.reschedule(sink, schedule, state.step, self._clock()),
            peers=lambda: self._peer_reports(sink),
            checkpoints=self._checkpoints,
            model_weights=lambda: offers.weights,
            graph_def=lambda: offers.graph_def() if offers.graph_def is not None else None,
            model_config=lambda: offers.model_config() if offers.model_config is not None else None,
            stats=self._stats,
            declared_direction=lambda key: offers.directions(key) if offers.directions is not None else None,
            ends_epochs=lambda: offers.ends_epochs,
            progress=lambda: offers.progress() if offers.progress is not None else None,
            learning_rate=lambda: offers.learning_rate,
            profiler=self._profiling,
            training_params=lambda: offers.training_params() if offers.training_params is not None else None,
            variables=lambda: offers.variables() if offers.variables is not None else None,
            model_summary=lambda: offers.model_summary() if offers.model_summary is not None else None,
            model_export=lambda: offers.export,
            announce_export=lambda exported: self._dispatcher.publish("model_exported", exported),
        )

    def _peer_reports(self, asking: Sink) -> list[PeerReport]:
        reports = []
        for record in self._roster.here:
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
        dispatcher = self._dispatcher
        for record in self._roster.here:
            if record.sink is not None and record.sink.name in states:
                # The sink's own work: a stop it asks for while loading is its request.
                previous, dispatcher.current = dispatcher.current, record
                try:
                    record.sink.load_state_dict(states[record.sink.name])
                finally:
                    dispatcher.current = previous


class BusCheckpoints:
    """:class:`Checkpoints` over a bus's barrier and the backend and store its publisher offers.

    Args:
        barrier: The bus's checkpoint barrier.
        offer: The offered ``(backend, store)``, or ``None`` (read at each use: a publisher
            offers when it begins).
        sinks: The bus's sinks on this task, in dispatch order.
        load_states: Gives each sink its saved state.
        publish: Publishes ``checkpoint_saved``.
        announce: Publishes ``checkpoint_saving``.
    """

    def __init__(
        self,
        barrier: Barrier,
        offer: Callable[[], tuple[CheckpointBackend, CheckpointStore] | None],
        sinks: Callable[[], Iterable[Sink]],
        load_states: Callable[[Mapping[str, Any]], None],
        publish: Callable[[CheckpointSaved], None],
        announce: Callable[[CheckpointSaved], None],
    ) -> None:
        self._barrier = barrier
        self._announce = announce
        self._offer = offer
        self._sinks = sinks
        self._load_states = load_states
        self._publish = publish

    def _offered(self) -> tuple[CheckpointBackend, CheckpointStore]:
        offered = self._offer()
        if offered is None:
            raise RuntimeError("no checkpoint backend: did the train publisher begin?")
        return offered

    @property
    def offered(self) -> bool:
        return self._offer() is not None

    @property
    def ready(self) -> bool:
        offered = self._offer()
        return offered is not None and offered[0].ready

    @property
    def store(self) -> CheckpointStore:
        return self._offered()[1]

    def check_state_names(self) -> None:
        check_state_names(self._sinks())

    def save(self, step: int, prefix: str, value: float | None, taken: Container[int] = ()) -> str | None:
        self._announce(CheckpointSaved(prefix, step, value))  # before the flush: what it writes is in
        prepared = self._barrier.prepare(step)
        if prepared is None:
            return None
        backend, store = self._offered()
        return self._barrier.commit(prepared, backend, store, prefix, value, taken)

    def keep_only(self, directory: str, kept: list[str], dropped: list[str]) -> None:
        self._barrier.keep_only(self.store, directory, kept, dropped)

    def mark_evaluated(self, prefix: str) -> None:
        self._barrier.mark_evaluated(self.store, prefix)

    def load_states(self, states: Mapping[str, Any]) -> None:
        self._load_states(states)

    def publish(self, saved: CheckpointSaved) -> None:
        self._publish(saved)

    def find(self, step: int) -> str | None:
        offered = self._offer()
        if offered is None:
            return None
        for sink in self._sinks():
            directory = sink.checkpoint_directory
            if directory is not None:
                held = [p for p in offered[1].checkpoints(directory) if step_of(p) == step]
                if held:
                    return held[-1]
        return None


def check_state_names(sinks: Iterable[Sink]) -> None:
    """Fail, naming them, if two of ``sinks`` with state share a name (their states are saved by name)."""
    seen: dict[str, Sink] = {}
    for sink in sinks:
        if type(sink).state_dict is Sink.state_dict:
            continue
        if sink.name in seen:
            raise ValueError(
                f"two sinks with state are named {sink.name!r} ({seen[sink.name]!r} and {sink!r}); "
                "their states are saved by name: pass name=... to tell them apart"
            )
        seen[sink.name] = sink
