"""Multi-worker training: where each subscriber runs, and one stop for the whole cluster.

In parameter-server training every worker runs its own copy of the training loop with its own
:class:`hookbus.EventBus`. Each subscriber declares where it runs (``runs_on``):

- ``"chief"``: only on the chief (like ``chief_only_hooks``); the default of the console,
  TensorBoard, CSV and checkpoint sinks;
- ``"all"``: on every worker; the default of every other sink and of function subscribers;
- ``"each"``: on every worker, with per-worker output: the sink's path gets the task's suffix
  (``worker-<i>``) at begin. Only sinks with a path (CSV, TensorBoard) support it.

A stop requested on any worker is written into a small string variable on the parameter server
(:class:`SharedStop`), which every worker reads with its due-step fetches and at least every
``check_every_n_steps`` of its own steps, so the whole cluster stops within that many local
steps of each worker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hookbus._rules._validate import flag, one_of, positive_int

if TYPE_CHECKING:
    from hookbus._bus._stops import Stops

__all__ = ["RUNS_ON", "SharedStop", "Task", "check_runs_on"]

RUNS_ON = ("chief", "all", "each")
STOP_SOURCE = "cluster"


def check_runs_on(value: object) -> str:
    """Validate a ``runs_on`` value."""
    return one_of("runs_on", value, RUNS_ON)


@dataclass(frozen=True)
class Task:
    """This process's place in a training cluster.

    Args:
        type: The job name, ``"worker"`` or ``"chief"``.
        index: The task index within the job (default 0).
        is_chief: Whether this task is the chief (default ``None``: a ``"chief"`` task, or
            worker 0 when the cluster has no ``"chief"`` job).
        has_chief_job: Whether the cluster has a ``"chief"`` job (default ``False``), for the
            default of ``is_chief``.
        collective: Whether the workers train in lockstep under a collective strategy
            (``MultiWorkerMirroredStrategy``; default ``False``: parameter-server training).
            Then sinks whose work every worker must join (checkpoints) run on every worker.
    """

    type: str
    index: int = 0
    is_chief: bool | None = None
    has_chief_job: bool = False
    collective: bool = False

    def __post_init__(self) -> None:
        if self.type not in ("worker", "chief"):
            raise ValueError(
                f"task type must be 'worker' or 'chief' (got {self.type!r}); parameter servers and "
                "evaluators run no training hook"
            )
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"task index must be a non-negative int (got {self.index!r})")
        flag("is_chief", self.is_chief, allow_none=True)
        flag("has_chief_job", self.has_chief_job)
        flag("collective", self.collective)
        if self.is_chief is None:
            chief = self.type == "chief" or (not self.has_chief_job and self.index == 0)
            object.__setattr__(self, "is_chief", chief)

    @property
    def suffix(self) -> str:
        """The per-worker output suffix, ``worker-<i>`` (``chief-<i>`` for a chief job)."""
        return f"{self.type}-{self.index}"

    def runs(self, runs_on: str, *, joins_collectives: bool = False) -> bool:
        """Whether a subscriber with ``runs_on`` runs on this task.

        ``joins_collectives``: the subscriber's work must run on every worker of a collective
        strategy (a checkpoint save), so it runs everywhere there whatever ``runs_on`` says.
        """
        joins = flag("joins_collectives", joins_collectives)
        return runs_on != "chief" or bool(self.is_chief) or (self.collective and bool(joins))

    @classmethod
    def from_tf_config(cls, environ: Mapping[str, str] | None = None) -> Task | None:
        """The task ``TF_CONFIG`` describes, or ``None`` when it is unset (one machine).

        An ``evaluator`` task evaluates on its own, like one machine: ``None`` too.

        Raises:
            ValueError: for malformed ``TF_CONFIG``, a cluster without a chief (no ``chief`` and
                no ``worker`` job), or a task that is not in the cluster.
        """
        raw = (os.environ if environ is None else environ).get("TF_CONFIG", "")
        if not raw.strip():
            return None
        try:
            config = json.loads(raw)
            cluster, task = config.get("cluster") or {}, config["task"]
            kind, index = task["type"], int(task.get("index", 0))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(
                f"TF_CONFIG must be JSON with 'cluster' and 'task': {{type, index}} (got {raw!r})"
            ) from error
        if not cluster.get("chief") and not cluster.get("worker"):
            raise ValueError(
                f"TF_CONFIG's cluster has no chief: it needs a 'chief' or a 'worker' job (got jobs {sorted(cluster)})"
            )
        if kind == "evaluator":
            return None
        if kind not in cluster or not 0 <= index < len(cluster[kind]):
            raise ValueError(f"TF_CONFIG's task {kind}:{index} is not in its cluster {cluster}")
        return cls(kind, index, has_chief_job=bool(cluster.get("chief")))


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
            ready = tf.compat.v1.is_variable_initialized(flag)
            self.read = tf.cond(ready, flag.read_value, lambda: tf.constant(""), name="read")
            value = tf.compat.v1.placeholder(tf.string, shape=(), name="reason")
            self._ops = {
                "ready": ready,
                "init": flag.initializer,
                "value": value,
                "assign": flag.assign(value, read_value=False),
                "clear": flag.assign("", read_value=False),
            }

    def session_created(self, session: Any, stops: Stops, *, first: bool) -> None:
        """Clear (chief, first session of a run) or initialise the flag, then honour it."""
        self._announced = False
        if first:
            self.local_step = 0
        if self.task.is_chief:
            if first:
                session.run(self._ops["clear"])  # a persistent PS may hold an earlier run's stop
            elif not session.run(self._ops["ready"]):
                session.run(self._ops["init"])
        self.observe(session.run(self.read), stops)

    def due(self) -> bool:
        """Whether the coming local step must read the flag even if no subscriber is due."""
        return (self.local_step + 1) % self.every == 0

    def observe(self, value: Any, stops: Stops) -> None:
        """Turn a stop another task wrote into a stop request on ``stops``."""
        if value and not stops.requested:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
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
