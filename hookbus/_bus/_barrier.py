"""The checkpoint barrier, run by the bus through the :class:`Sink` interface, in two phases.

Prepare (on the training thread): a control sink may veto the save (the NaN guard on a
non-finite step); every writer hands everything up to S to the OS; every stateful sink's state
for S is collected. Commit: the model is saved through the publisher's backend and the states
beside it, then the pointer names it, then what retention dropped is pruned; every file goes
through the publisher's :class:`~hookbus.publisher_api.CheckpointStore`. The
checkpoint sink decides when and what to keep; the bus does the rest, so no sink needs to know
another's class, and an asynchronous save can slot into the commit. Durability is against
process crashes: the state file and the pointer are written atomically; nothing fsyncs the
model files beyond what TensorFlow does.

An observability writer that cannot flush (a full disk, a file-size limit, a file it may no
longer write) must not stop training: a sink whose policy isolates its errors is reported and
disabled, and the checkpoint is saved without its state. Its output has then lost the
exactly-once promise, and the report says so.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hookbus._checkpoints._store import step_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from hookbus._bus._roster import Roster
    from hookbus._bus._subscription import Subscriber
    from hookbus._checkpoints._backend import CheckpointBackend
    from hookbus._checkpoints._store import CheckpointStore

__all__ = ["Barrier", "PreparedCheckpoint"]

logger = logging.getLogger("hookbus")


@dataclass(frozen=True)
class PreparedCheckpoint:
    """What the prepare phase hands to the commit: the step and every live sink's state.

    Attributes:
        step: The step the checkpoint holds.
        states: ``state_dict()`` of every sink with state, by sink name.
    """

    step: int
    states: Mapping[str, dict[str, Any]]


class Barrier:
    """Prepares and commits checkpoints over the sinks of a roster (flush, vetoes, states).

    Args:
        roster: Who is subscribed (the live sinks here take part).
        announce: Publishes a sink's failure (``subscriber_error``) to the others: the
            dispatcher's :meth:`~hookbus._bus._dispatch.Dispatcher.announce_error`.
    """

    def __init__(
        self,
        roster: Roster,
        announce: Callable[[Subscriber, str, int, BaseException], None],
    ) -> None:
        self._roster = roster
        self._announce = announce

    def _sinks(self) -> list[Subscriber]:
        return [r for r in self._roster.here if r.sink is not None and not r.disabled]

    def veto(self, step: int) -> str | None:
        """The first control sink's reason not to save a checkpoint of ``step``, or ``None``."""
        for record in self._sinks():
            sink = record.sink
            assert sink is not None
            if sink.controls_training:
                reason = sink.checkpoint_veto(step)
                if reason is not None:
                    return f"{sink.name}: {reason}"
        return None

    def prepare(self, step: int) -> PreparedCheckpoint | None:
        """Flush every live sink, collect their states; ``None`` when a control sink vetoes.

        A sink whose flush raises is disabled and reported when its policy is ``"isolate"`` or
        ``"disable"``; a ``"raise"`` sink's error propagates (the save does not happen).
        """
        reason = self.veto(step)
        if reason is not None:
            logger.warning("no checkpoint of step %d: %s", step, reason)
            return None
        return PreparedCheckpoint(step, self._flushed_states(step, f"for the checkpoint at step {step}"))

    def commit(
        self,
        prepared: PreparedCheckpoint,
        backend: CheckpointBackend,
        store: CheckpointStore,
        prefix: str,
        value: float | None,
        taken: Container[int] = (),
    ) -> str | None:
        """Save the model at ``prefix`` through ``backend``, then the states beside it in ``store``.

        The backend may name the checkpoint after a later step than ``prepared.step``
        (parameter-server training: other workers moved the global step); the states go under
        that name. Returns the prefix written, or ``None`` when that later step is in ``taken``
        (already on disk: one checkpoint per step). The pointer is not touched: the checkpoint
        seam's ``keep_only`` sets it in the store.
        """
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        try:
            written = backend.save(prefix)
            held = step_of(written)
            if held is not None and held != prepared.step and held in taken:
                store.remove(written)
                return None
            state = {"step": held, "value": value, "sinks": dict(prepared.states)}
            store.write_state(written, state)
        except BaseException:
            store.remove(prefix)  # the pointer still names the previous checkpoint
            raise
        return written

    def mark_evaluated(self, store: CheckpointStore, prefix: str) -> None:
        """Checkpoint ``prefix`` has been evaluated: flush every sink, then write the sinks' states
        (which now include that evaluation) beside it, marked ``evaluated`` — atomically, so a
        kill before this leaves the pre-evaluation states and the evaluation is made up on restart."""
        data = store.read_state(prefix)
        if data is None:  # not a checkpoint of a CheckpointSink: nothing to keep in step with
            return
        step = int(data.get("step") or step_of(prefix) or 0)
        states = self._flushed_states(step, f"after the evaluation of step {step}")
        marked = {**data, "sinks": states, "evaluated": True}
        # Keras's validation and train_and_evaluate may both mark one evaluation: write once.
        if json.loads(json.dumps(marked)) != data:
            store.write_state(prefix, marked)

    def _flushed_states(self, step: int, why: str) -> dict[str, dict[str, Any]]:
        """Flush every live sink, then the ``state_dict()`` of each with state, by name."""
        self.flush(step, why)
        return {r.name: state for r in self._sinks() if (state := r.sink.state_dict())}  # type: ignore[union-attr]

    def flush(self, step: int, why: str) -> None:
        """Flush every live sink; one whose flush raises is disabled and reported when its policy
        is ``"isolate"`` or ``"disable"``, a ``"raise"`` sink's error propagates."""
        for record in self._sinks():
            sink = record.sink
            assert sink is not None
            try:
                sink.flush()
            except Exception as error:
                if record.on_error == "raise":
                    raise
                self._disable(record, step, why, error)

    def _disable(self, record: Subscriber, step: int, why: str, error: Exception) -> None:
        record.failed(disable=True)
        logger.error(
            "subscriber %r could not flush %s and is disabled for the rest of the run (on_error=%r); "
            "training goes on without it. Its output has lost the exactly-once promise: what it had "
            "not written is missing, and a resume will not rewrite it",
            record.name,
            why,
            record.on_error,
            exc_info=error,
        )
        self._announce(record, "flush", step, error)
