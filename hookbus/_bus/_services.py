"""Each sink's :class:`~hookbus.sink_api.SinkContext`, built from the bus's parts (never the bus
itself), and the bus's side of the checkpoint seam (:class:`~hookbus.sink_api.Checkpoints`)."""

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
        offers: What the training publisher offers (checkpoints and their store, the learning
            rate, the profiling seam, the model view).
        clock: The bus's monotonic clock.
        stats: Every subscriber's health (``bus.stats``).
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
    ) -> None:
        self._roster = roster
        self._keys = keys
        self._state = state
        self._dispatcher = dispatcher
        self._offers = offers
        self._clock = clock
        self._stats = stats
        self._checkpoints = BusCheckpoints(barrier, offers, roster, dispatcher)

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
            stats=self._stats,
            learning_rate=lambda: offers.learning_rate,
            profiler=offers.profiler,
            model=lambda: offers.model,
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


class BusCheckpoints:
    """:class:`Checkpoints` over a bus's barrier, the checkpoints its publisher offers, its roster
    and its dispatcher: each call goes to the part that owns it (the barrier's phases and vetoes,
    the store's files, the dispatcher's events, the sinks' states).

    Args:
        barrier: The bus's checkpoint barrier.
        offers: What the training publisher offers: its ``(backend, store)``, or ``None`` (read at
            each use: a publisher offers when it begins).
        roster: The bus's subscribers (the sinks on this task, in dispatch order).
        dispatcher: Publishes ``checkpoint_saving`` and ``checkpoint_saved``, and says whose work
            is being done (a sink loading its state).
    """

    def __init__(self, barrier: Barrier, offers: Offers, roster: Roster, dispatcher: Dispatcher) -> None:
        self._barrier = barrier
        self._offers = offers
        self._roster = roster
        self._dispatcher = dispatcher

    def _offered(self) -> tuple[CheckpointBackend, CheckpointStore]:
        offered = self._offers.checkpoints
        if offered is None:
            raise RuntimeError("no checkpoint backend: did the train publisher begin?")
        return offered

    @property
    def offered(self) -> bool:
        return self._offers.checkpoints is not None

    @property
    def ready(self) -> bool:
        offered = self._offers.checkpoints
        return offered is not None and offered[0].ready

    @property
    def store(self) -> CheckpointStore:
        return self._offered()[1]

    def check_state_names(self) -> None:
        check_state_names(self._roster.sinks)

    def save(self, step: int, prefix: str, value: float | None, taken: Container[int] = ()) -> str | None:
        # Announced before the flush: what the writers write for it is in the checkpoint.
        self._dispatcher.publish("checkpoint_saving", CheckpointSaved(prefix, step, value))
        prepared = self._barrier.prepare(step)
        if prepared is None:
            return None
        backend, store = self._offered()
        return self._barrier.commit(prepared, backend, store, prefix, value, taken)

    def keep_only(self, directory: str, kept: list[str], dropped: list[str]) -> None:
        store = self.store
        store.set_pointer(directory, kept)
        for old in dropped:
            store.remove(old)

    def mark_evaluated(self, prefix: str) -> None:
        self._barrier.mark_evaluated(self.store, prefix)

    def load_states(self, states: Mapping[str, Any]) -> None:
        dispatcher = self._dispatcher
        for record in self._roster.here:
            if record.sink is not None and record.sink.name in states:
                # The sink's own work: a stop it asks for while loading is its request.
                previous, dispatcher.current = dispatcher.current, record
                try:
                    record.sink.load_state_dict(states[record.sink.name])
                finally:
                    dispatcher.current = previous

    def publish(self, saved: CheckpointSaved) -> None:
        self._dispatcher.publish("checkpoint_saved", saved)

    def find(self, step: int) -> str | None:
        offered = self._offers.checkpoints
        if offered is None:
            return None
        for sink in self._roster.sinks:
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
