"""One stop for a whole parameter-server cluster: a flag on the parameter server.

A stop requested on any worker is written into a small string variable on the parameter server
(:class:`SharedStop`), which every worker reads with its due-step fetches and at least every
``check_every_n_steps`` of its own steps, so the whole cluster stops within that many local
steps of each worker. Beside it, the chief marks each restore (a restarted chief puts the
parameter server's variables, the global step included, back to a checkpoint): a worker that
reads a new mark knows its timeline since that checkpoint was undone, even when the global step
it reads never went below its previous read (the restarted chief trained past it meanwhile).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from hookbus._contract._cluster import STOP_SOURCE, Task
from hookbus._rules._validate import positive_int

if TYPE_CHECKING:
    from hookbus._bus._stops import Stops

__all__ = ["SharedStop"]

_SEP = "\x1f"  # between the flag and the restore mark in one read (no reason holds it)
#: How long a worker whose step went back waits for the chief's restore mark (the chief writes it as
#: its restored session begins: milliseconds after the restore; a chief killed before writing it
#: costs this wait once).
MARK_WAIT_SECS = 30.0
_MARK_POLL_SECS = 0.005


class SharedStop:
    """A stop flag on the parameter server that every worker of one cluster reads and sets.

    The transport of the run's :class:`~hookbus._bus._stops.Stops` across parameter-server workers.

    Built by :class:`hookbus.EventBusHook` in ``begin`` when it has a :class:`Task`: a string
    variable (empty: no stop; otherwise ``"<task>: <reason>"``) placed on the device of the
    global step, which ``replica_device_setter`` put on the parameter server. It is kept out of
    the variable collections, so no checkpoint holds it and a resume never stops at once; the
    chief clears it at its first session of a run.

    Args:
        task: This process's task.
        check_every_n_steps: Read the flag at least every n local steps (default 10); due
            steps read it anyway.
    """

    def __init__(self, task: Task, check_every_n_steps: int = 10) -> None:
        positive_int("check_stop_every_n_steps", check_every_n_steps)
        self.task = task
        self.every = check_every_n_steps
        self.local_step = 0
        self.read: Any = None
        self._ops: dict[str, Any] = {}
        self._announced = False
        self._mark: str | None = None  # the restore mark last read (None: none read this session)

    def build(self, tf: Any, graph: Any, global_step: Any) -> None:
        """Make the flag and its ops next to ``global_step`` (before the graph is finalized)."""
        if global_step is None:
            raise ValueError(
                "multi-worker training needs a global step: create it with "
                "tf.compat.v1.train.get_or_create_global_step() under the replica_device_setter"
            )
        if not global_step.device:
            raise ValueError(
                "the global step has no device, so a stop could not be shared between workers; build "
                "the graph under `with tf.device(tf.compat.v1.train.replica_device_setter(cluster=...))`"
            )
        if self._ops and self.read.graph is graph:
            return
        with graph.as_default(), graph.device(global_step.device), tf.name_scope("hookbus_stop"):
            flag = tf.compat.v1.Variable("", dtype=tf.string, trainable=False, collections=[], name="flag")
            # "<nonce>:<checkpoint step>", written by the chief at each session it restores.
            mark = tf.compat.v1.Variable("", dtype=tf.string, trainable=False, collections=[], name="restored")
            ready = tf.compat.v1.is_variable_initialized(flag)
            marked = tf.compat.v1.is_variable_initialized(mark)
            read_flag = tf.cond(ready, flag.read_value, lambda: tf.constant(""))
            read_mark = tf.cond(marked, mark.read_value, lambda: tf.constant(""))
            self.read = tf.strings.join([read_flag, read_mark], separator=_SEP, name="read")
            value = tf.compat.v1.placeholder(tf.string, shape=(), name="reason")
            mark_value = tf.compat.v1.placeholder(tf.string, shape=(), name="mark")
            self._ops = {
                "ready": ready,
                "init": flag.initializer,
                "value": value,
                "assign": flag.assign(value, read_value=False),
                "clear": flag.assign("", read_value=False),
                "marked": marked,
                "mark_init": mark.initializer,
                "mark_value": mark_value,
                "mark": mark.assign(mark_value, read_value=False),
            }

    def mark_restore(self, session: Any, restored_step: int) -> None:
        """The chief's session restored the checkpoint of ``restored_step``: mark it for the workers,
        first thing in the session (a worker that sees its step go back waits for the mark)."""
        mark = f"{uuid.uuid4().hex}:{restored_step}"
        session.run(self._ops["mark"], feed_dict={self._ops["mark_value"]: mark})

    def session_created(self, session: Any, stops: Stops, *, first: bool) -> None:
        """Clear (chief, first session of a run) or initialise the flag, then honour it; the chief
        initialises the mark where no restore wrote one (:meth:`mark_restore`). The mark read now is
        this task's own starting point: only a later one is a restore under it."""
        self._announced = False
        if first:
            self.local_step = 0
        if self.task.is_chief:
            if first:
                session.run(self._ops["clear"])  # a persistent PS may hold an earlier run's stop
            elif not session.run(self._ops["ready"]):
                session.run(self._ops["init"])
            if not session.run(self._ops["marked"]):
                session.run(self._ops["mark_init"])
        value = session.run(self.read)
        self._mark = None
        self.restore_seen(value)
        self.observe(value, stops)

    def restore_seen(self, value: Any) -> int | None:
        """The checkpoint step of a restore the chief marked since the last read of ``value`` (a
        read of :attr:`read`), or ``None``."""
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        mark = text.rpartition(_SEP)[2]
        last, self._mark = self._mark, mark
        if last is None or mark == last or ":" not in mark:
            return None
        step = mark.rpartition(":")[2]
        return int(step) if step.isdigit() else None

    def await_restore(self, session: Any, stops: Stops, wait_secs: float = MARK_WAIT_SECS) -> int | None:
        """The step went back under this worker: a chief is restoring. The checkpoint step its restore
        mark names, read until it comes (at most ``wait_secs``; a stop read meanwhile ends the wait), or
        ``None``. A worker cuts its files at that step once, so a row it publishes on the restored
        timeline before the mark arrives is never cut by the mark."""
        end = time.monotonic() + wait_secs
        while True:
            value = session.run(self.read)
            restored = self.restore_seen(value)
            self.observe(value, stops)
            if restored is not None or stops.requested or time.monotonic() >= end:
                return restored
            time.sleep(_MARK_POLL_SECS)

    def due(self) -> bool:
        """Whether the coming local step must read the flag even if no subscriber is due."""
        return (self.local_step + 1) % self.every == 0

    def observe(self, value: Any, stops: Stops) -> None:
        """Turn a stop another task wrote into a stop request on ``stops`` (``value``: a read of
        :attr:`read`, the flag with the restore mark)."""
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        text = text.rpartition(_SEP)[0] if _SEP in text else text
        if text and not stops.requested:
            self._announced = True  # it is already shared; do not echo it
            stops.request(text, source=STOP_SOURCE)

    def announce(self, session: Any, stops: Stops, reason: str | None = None) -> None:
        """Write this task's stop (``reason`` or the run's first stop reason) for the others, once."""
        if self._announced or session is None:
            return
        why = reason if reason is not None else stops.reason
        if why is None:
            return
        self._announced = True
        session.run(self._ops["assign"], feed_dict={self._ops["value"]: f"{self.task.suffix}: {why}"})
