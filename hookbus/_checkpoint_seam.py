"""The checkpoint seam: what a checkpoint sink (and a sink that reads checkpoints) gets of its bus.

One object, :attr:`hookbus.SinkContext.checkpoints`. The sink decides when to save and what to
keep; through this seam it asks the bus to run the barrier for a step (vetoes, flush, states, the
model through the publisher's backend, the states beside it), to make a list of checkpoints the
pointer's and prune the rest, and to publish ``checkpoint_saved``. Every file it touches goes
through :attr:`Checkpoints.store`, the publisher's store (TensorFlow's layout unless the
publisher gave its own), so the sink never assumes a layout.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from hookbus._store import step_of
from hookbus._subscriber import Sink

if TYPE_CHECKING:
    from hookbus._barrier import Barrier
    from hookbus._checkpoint import CheckpointBackend
    from hookbus._events import CheckpointSaved
    from hookbus._store import CheckpointStore

__all__ = ["BusCheckpoints", "Checkpoints", "check_state_names"]


class Checkpoints(Protocol):
    """Checkpointing as the bus offers it to one sink for one run (:attr:`hookbus.SinkContext.checkpoints`)."""

    @property
    def offered(self) -> bool:
        """Whether a train publisher offers checkpoints (a backend and its store) on this bus."""
        ...

    @property
    def ready(self) -> bool:
        """Whether the publisher's model can be saved now (a live session or model)."""
        ...

    @property
    def store(self) -> CheckpointStore:
        """The publisher's checkpoint store: listing, the pointer, state files, removing.

        Raises:
            RuntimeError: No publisher offers checkpoints (see :attr:`offered`).
        """
        ...

    def check_state_names(self) -> None:
        """Fail, naming them, if two sinks with state share a name (their states are saved by name)."""
        ...

    def save(self, step: int, prefix: str, value: float | None, taken: Container[int] = ()) -> str | None:
        """The checkpoint barrier for ``step``: vetoes, flush, states, then the model at ``prefix``
        and the states beside it. The prefix written, or ``None`` when a control sink vetoed or
        the step the model holds (parameter-server training) is in ``taken``. The pointer is
        not touched: see :meth:`record`."""
        ...

    def record(self, directory: str, kept: list[str], dropped: list[str]) -> None:
        """Make ``kept`` (latest last) the pointer's checkpoints, atomically; then remove ``dropped``."""
        ...

    def record_evaluated(self, prefix: str) -> None:
        """``prefix`` (a checkpoint of the current step) was evaluated: flush, then write the
        sinks' states beside it again, marked ``evaluated``."""
        ...

    def load_states(self, states: Mapping[str, Any]) -> None:
        """Give each sink its state saved beside a checkpoint (``states``: by sink name)."""
        ...

    def publish(self, saved: CheckpointSaved) -> None:
        """Publish ``checkpoint_saved``."""
        ...

    def find(self, step: int) -> str | None:
        """The prefix of a checkpoint of ``step`` that a checkpoint sink of this bus keeps, or ``None``."""
        ...


class BusCheckpoints:
    """:class:`Checkpoints` over a bus's barrier and the backend and store its publisher offers.

    Args:
        barrier: The bus's checkpoint barrier.
        offer: The offered ``(backend, store)``, or ``None`` (read at each use: a publisher
            offers when it begins).
        sinks: The bus's sinks on this task, in dispatch order.
        load_states: Gives each sink its saved state.
        publish: Publishes ``checkpoint_saved``.
    """

    def __init__(
        self,
        barrier: Barrier,
        offer: Callable[[], tuple[CheckpointBackend, CheckpointStore] | None],
        sinks: Callable[[], Iterable[Sink]],
        load_states: Callable[[Mapping[str, Any]], None],
        publish: Callable[[CheckpointSaved], None],
    ) -> None:
        self._barrier = barrier
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
        prepared = self._barrier.prepare(step)
        if prepared is None:
            return None
        backend, store = self._offered()
        return self._barrier.commit(prepared, backend, store, prefix, value, taken)

    def record(self, directory: str, kept: list[str], dropped: list[str]) -> None:
        self._barrier.record(self.store, directory, kept, dropped)

    def record_evaluated(self, prefix: str) -> None:
        self._barrier.record_evaluated(self.store, prefix)

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
