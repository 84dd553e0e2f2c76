"""Synchronous multi-worker training (``tf.distribute.MultiWorkerMirroredStrategy``).

Every worker runs the same steps in lockstep: each training step ends in an all-reduce that
waits for every worker. A worker that stops on its own (its early stopping, NaN guard or
SIGTERM) would leave the others waiting in their next all-reduce forever, so under a
collective strategy a stop only takes effect when the workers agree on it:
:class:`CollectiveStop` all-reduces every worker's stop flag at fixed steps (each time the
step crosses a multiple of ``check_every_n_steps``, the same steps on every worker, and at
begin and at the end of each epoch / evaluation), and every worker stops at that step when
any of them asked. A planned last step (a :class:`~hookbus.sinks.StopAtStepSink` on every
worker, ``total_steps``) is agreed at begin: when every worker plans the same one, they also
agree at that step, so the run ends exactly there. A learning-rate request (a sink's
``LearningRate.request``) is agreed the same way, in the same rounds: the first proposing
worker's (the chief's when it asks) is applied by every worker at the round's step, before the
next training step, so no two workers ever train with different rates.

The publishers (:class:`hookbus.EventBusCallback`, :class:`hookbus.LoopPublisher`) find the
strategy (the model's ``distribute_strategy`` or ``strategy=``) and make the task with
:func:`task_of_strategy`: a single-worker strategy is one machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hookbus._contract._cluster import STOP_SOURCE, Task
from hookbus._contract._learning_rate import RateRequest
from hookbus._rules._validate import positive_int
from hookbus._tf._agreement import AgreedDecision, agree
from hookbus._tf._import import require_tensorflow

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from hookbus._publishing._publisher import PublisherCore

__all__ = ["CollectiveStop", "task_of_strategy"]


def _workers(cluster: dict[str, list[str]]) -> list[tuple[str, int]]:
    """The training tasks of a cluster spec, chief first: one all-reduce slot each."""
    return [(job, i) for job in ("chief", "worker") for i in range(len(cluster.get(job, ())))]


def task_of_strategy(strategy: Any) -> Task | None:
    """This worker's :class:`Task` under a multi-worker collective strategy, else ``None``.

    ``None`` for no strategy, a strategy of one machine (``MirroredStrategy``, a single-worker
    ``MultiWorkerMirroredStrategy``) and any strategy without a cluster resolver.

    Raises:
        ValueError: for a parameter-server strategy (use :class:`hookbus.EventBusHook` with
            ``MonitoredTrainingSession`` there) or a task that is not a training worker.
    """
    if strategy is None:
        return None
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return None
    cluster = resolver.cluster_spec().as_dict()
    if cluster.get("ps"):
        raise ValueError(
            f"{type(strategy).__name__} with parameter servers is not a collective strategy; "
            "publish parameter-server training with hookbus.EventBusHook"
        )
    if len(_workers(cluster)) < 2:
        return None
    kind, index = resolver.task_type, int(resolver.task_id or 0)
    if (kind, index) not in _workers(cluster):
        raise ValueError(f"task {kind}:{index} is not a training worker of the cluster {cluster}")
    return Task(kind, index, has_chief_job=bool(cluster.get("chief")), collective=True)


class CollectiveStop:
    """One stop for every worker of a synchronous cluster, agreed at fixed steps.

    A transport of the run's :class:`~hookbus._bus._stops.Stops` across workers: each round is one
    :func:`hookbus._tf._agreement.agree` over the stop and, at begin, the planned last step (two
    :class:`~hookbus._tf._agreement.AgreedDecision` kinds), in one all-reduce.

    Args:
        strategy: The ``MultiWorkerMirroredStrategy`` training runs under.
        task: This worker's task (:func:`task_of_strategy`).
        check_every_n_steps: Agree each time the step crosses a multiple of n (default 10):
            a stop asked for at step s takes effect at the first such step after s, on every
            worker at once.
        exchange: Sums a list of floats over every worker (default: an all-reduce under
            ``strategy``).
    """

    def __init__(
        self,
        strategy: Any,
        task: Task,
        check_every_n_steps: int = 10,
        *,
        exchange: Callable[[list[float]], list[float]] | None = None,
    ) -> None:
        self.every = positive_int("check_stop_every_n_steps", check_every_n_steps)
        self.strategy = strategy
        self.task = task
        cluster = strategy.cluster_resolver.cluster_spec().as_dict()
        self._names = [f"{job}-{i}" for job, i in _workers(cluster)]
        self._slot = _workers(cluster).index((task.type, task.index))
        self._last = 0
        self._planned: int | None = None  # a last step every worker plans: agreed there too
        self._reduce: Any = None
        self._exchange = self._all_reduce if exchange is None else exchange
        count = len(self._names)
        self._stop = AgreedDecision("stop", combine=lambda flags: 1.0)
        # Every worker proposes its planned last step (0: none); agreed when all plan the same.
        self._plan = AgreedDecision("last_step", combine=lambda steps: _same(steps, count))
        # A new rate, or a new multiplier on a schedule: the first proposer's (slot order).
        self._rate = AgreedDecision("learning_rate")
        self._multiplier = AgreedDecision("learning_rate_multiplier")
        #: Whether the workers agreed to stop: the publisher stops only then.
        self.agreed = False

    def reset(self, step: int) -> None:
        """A session starts at ``step``: nothing agreed yet."""
        self._last = step // self.every
        self._planned = None
        self.agreed = False

    def due(self, step: int) -> bool:
        """Whether the workers agree at ``step``: it crosses a multiple of ``check_every_n_steps``
        or reaches the planned last step (the same steps on every worker)."""
        return step // self.every > self._last or (self._planned is not None and step >= self._planned)

    def _all_reduce(self, flags: list[float]) -> list[float]:
        if self._reduce is None:
            tf = require_tensorflow("MultiWorkerMirroredStrategy support")
            strategy = self.strategy

            # A worker with several devices runs one replica per device: each adds its share.
            local = float(len(strategy.extended.worker_devices))

            def reduce(value: Any) -> Any:
                return strategy.reduce("SUM", strategy.run(lambda v: v / local, args=(value,)), axis=None)

            self._reduce = tf.function(reduce)  # eager collectives are slow and warn; trace once
            self._tf = tf
        result = self._reduce(self._tf.constant(flags, dtype=self._tf.float64))  # exact steps to 2**53
        # The local shares add up to the value, to a rounding error that 12 significant digits drop:
        # steps stay exact, and a learning rate keeps its digits (it is no multiple of 0.001).
        return [float(f"{float(v):.12g}") for v in result.numpy()]

    def agree(self, core: PublisherCore, step: int, *, plan: bool = False) -> bool:
        """One agreement round (every worker calls it at the same point); returns :attr:`agreed`.

        A stop another worker asked for becomes a stop request on ``core``'s stops (source
        ``"cluster"``), naming the workers that asked. With ``plan`` (at begin) the workers
        also compare their planned last steps.
        """
        self._last = max(self._last, step // self.every)
        if self._planned is not None and step >= self._planned:
            self._planned = None
        stops = core.stops
        if stops.requested:
            self._stop.propose(1.0, reason=stops.reason or "", source=self.task.suffix, step=step)
        if plan:
            sinks = [r.sink for r in core.local_subscribers() if r.sink is not None]
            planned = min((t for s in sinks if (t := s.total_steps) is not None), default=0)
            self._plan.propose(float(planned), reason="planned last step", source=self.task.suffix, step=step)
            self._planned = None
        rate = core.learning_rate
        asked = rate.take() if rate is not None and rate.pending is not None else None
        if asked is not None:
            kind = self._rate if asked.rate is not None else self._multiplier
            kind.propose(asked.rate or asked.multiplier or 0.0, reason=asked.reason, source=asked.source, step=step)
        self.agreed = False
        # Every kind in every round: the all-reduce keeps one shape (traced once).
        decisions = (self._stop, self._plan, self._rate, self._multiplier)
        for decided in agree(decisions, self._exchange, slot=self._slot, names=self._names, step=step):
            if decided.kind == "last_step":
                self._planned = round(decided.value) if decided.value > step else None
            elif decided.kind.startswith("learning_rate"):
                mine = asked is not None and self.task.suffix in decided.by
                reason = asked.reason if asked is not None and mine else f"{', '.join(decided.by)} asked"
                source = asked.source if asked is not None and mine else STOP_SOURCE
                by_rate = decided.kind == "learning_rate"
                value = decided.value
                request = RateRequest(value if by_rate else None, None if by_rate else value, reason, source)
                core.apply_learning_rate(request, step)
            else:
                self.agreed = True
                if not stops.requested:
                    stops.request(f"{', '.join(decided.by)} stopped", step=step, source=STOP_SOURCE)
        return self.agreed


def _same(values: Sequence[float], count: int) -> float | None:
    """The value every one of ``count`` workers gave, or ``None`` when they differ."""
    return values[0] if len(values) == count and all(v == values[0] for v in values) else None
