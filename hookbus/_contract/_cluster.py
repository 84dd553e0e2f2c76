"""Multi-worker training: which task this is, and where each subscriber runs.

In parameter-server training every worker runs its own copy of the training loop with its own
:class:`hookbus.EventBus`. Each subscriber declares where it runs (``runs_on``):

- ``"chief"``: only on the chief (like ``chief_only_hooks``); the default of the console,
  TensorBoard, CSV and checkpoint sinks;
- ``"all"``: on every worker; the default of every other sink and of function subscribers;
- ``"each"``: on every worker, with per-worker output: the sink's path gets the task's suffix
  (``worker-<i>``) at begin. Only sinks with a path (CSV, TensorBoard) support it.

A stop requested on any worker reaches every other: through a flag on the parameter server
(:class:`hookbus._tf.hook._shared_stop.SharedStop`) or the collective's agreement
(``hookbus/_tf/_collective.py``); either requests it on the other workers' buses with the source
:data:`STOP_SOURCE`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from hookbus._rules._validate import flag, one_of

__all__ = ["RUNS_ON", "STOP_SOURCE", "Task", "check_runs_on"]

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
