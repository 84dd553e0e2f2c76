"""LoopPublisher: the publisher for hand-written eager and ``tf.function`` training loops."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from hookbus._contract._learning_rate import LEARNING_RATE_KEY
from hookbus._contract._publisher_keys import check_fetch_keys
from hookbus._publishing._publisher import PublisherCore
from hookbus._rules._validate import optional_positive_int, positive_int
from hookbus._tf._checkpoint_tf1 import TENSORFLOW
from hookbus._tf._checkpoint_tf2 import Restore, TF2CheckpointBackend, check_checkpoint, check_restore, restore_latest
from hookbus._tf._collective import CollectiveStop, task_of_strategy
from hookbus._tf._export_tf import loop_export
from hookbus._tf._learning_rate_tf import OptimizerRate, VariableRate
from hookbus._tf._machine_tf import tensorflow_machine
from hookbus._tf._profiler_tf import TFProfiler
from hookbus._tf._weights_tf import VariableWeights
from hookbus._tf.loop._model_view import LoopModelView
from hookbus._tf.loop._replicas import ReplicaValues

if TYPE_CHECKING:
    from types import TracebackType

    from hookbus._bus._bus import EventBus

__all__ = ["LoopPublisher"]

#: What :meth:`LoopPublisher.step` takes: the step's values, or a function returning them.
StepValues = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


class LoopPublisher:
    """Publishes a custom training loop on an :class:`EventBus`: call :meth:`step` once per step.

    Example::

        loop = hookbus.LoopPublisher(bus, keys=["loss"], step_counter=optimizer.iterations,
                                     checkpoint=tf.train.Checkpoint(model=model, optimizer=optimizer),
                                     restore=True)
        with bus, loop:
            for batch in batches:
                if loop.should_stop:                      # before training: a resumed run whose
                    break                                 # stop came before it trains nothing
                loop.step(train_step(batch))              # a dict of tensors, or a callable

    ``with loop:`` publishes ``begin`` and ``session_created`` (restoring the latest checkpoint
    first when ``restore`` asks), and on a clean exit the ``at_end`` values and ``end``. Each
    :meth:`step` is one training step, planned with the subscribers' schedules: on a quiet step
    it compares two ints and returns, touching no value (the callable is not called; only the
    step counter, when given, is read); on a due step it converts only the due subscribers' keys. Values are tensors
    (converted with ``.numpy()``), numpy values or Python numbers.

    Steps: with ``step_counter`` (a variable such as ``optimizer.iterations``; recommended) the
    step is read from it at every call, so it survives a restore and is exact also when one call
    runs several optimizer steps (a ``tf.function`` with an inner loop); call :meth:`step` after
    the update. Without it, each call is one step, counted from 0 or from the restored
    checkpoint's ``-N`` suffix.

    Per-replica values (``strategy.run``'s ``PerReplica`` results; ``strategy=`` a one-machine
    strategy such as ``MirroredStrategy``) are published as their mean across replicas, computed
    on due steps only as ``strategy.reduce(ReduceOp.MEAN, value, axis=None)`` computes it, so a
    NaN on any one replica reaches the NaN guard. Without ``strategy=``, or under a multi-worker
    strategy (where this worker's replicas are not all of them), they fail at the first due step,
    naming ``strategy.reduce``. A value no sink can use (a dict, a string, ``None``) fails at the
    first step it appears, naming its key and type.

    Multi-worker (``strategy=`` a ``MultiWorkerMirroredStrategy`` with two or more workers):
    the bus runs as this worker's :class:`hookbus.Task`, so the chief-only sinks (console,
    TensorBoard, CSV) run on the chief alone and checkpoints follow TensorFlow's rule (every
    worker saves; see :class:`~hookbus.sinks.CheckpointSink`). Every worker runs the same loop
    and calls :meth:`step`, :meth:`evaluate` and ``with loop:`` at the same points. A stop any
    worker asks for takes effect on every worker at the same step: the workers all-reduce
    their stop flags when the step crosses a multiple of ``check_stop_every_n_steps``, at
    begin and in :meth:`evaluate`, and :attr:`should_stop` turns true only then, so no worker
    is left waiting in an all-reduce. Pass values reduced across workers
    (``strategy.reduce``), so that every worker's sinks decide alike.

    Args:
        bus: The bus to publish on.
        keys: The keys :meth:`step` provides.
        eval_keys: The keys :meth:`evaluate` provides, published as ``eval/<key>`` (default none).
        step_counter: A variable holding completed training steps (default ``None``).
        checkpoint: A ``tf.train.Checkpoint`` for checkpoint sinks (default ``None``: none).
        restore: ``False`` (default), ``True`` (the CheckpointSink's directory) or a directory.
        weights: The model's variables, e.g. ``model.weights`` (default ``None``): offered to sinks
            in memory, for ``EarlyStoppingSink(restore_best=True)``.
        strategy: The ``tf.distribute`` strategy the loop trains under (default ``None``):
            per-replica values are published as their mean across replicas (see above); a
            multi-worker ``MultiWorkerMirroredStrategy`` also runs the bus as this worker's task.
        check_stop_every_n_steps: Under a multi-worker strategy, agree on stopping each time
            the step crosses a multiple of n (default 10).
        learning_rate: The ``tf.Variable`` the loop's optimizer reads its rate from (default
            ``None``), offered to the sinks that read or steer it and published as the key
            ``learning_rate`` (read on due steps; the values passed to :meth:`step` need not hold it).
        optimizer: The loop's Keras optimizer (default ``None``), instead of ``learning_rate``:
            its rate, or its ``LearningRateSchedule`` times hookbus's multiplier.
        batch_size: The examples each training step takes, for examples per second
            (``Event.examples``; default ``None``: not counted); a call that trained fewer (a short
            last batch) says so with ``step(values, examples=n)``.
        serving: The model to export for serving, offered to :class:`~hookbus.sinks.ExportSink`
            (default ``None``: none): a Keras model (a ``.keras`` file, ``model.save``) or a
            ``tf.Module`` with exactly one ``tf.function`` that has an ``input_signature`` (a
            SavedModel whose ``serving_default`` is that function, ``tf.saved_model.save``).

    Raises:
        ValueError, TypeError: at construction for malformed arguments; at begin for
            ``restore`` without a checkpoint, or without a checkpoint sink when ``True``.
    """

    def __init__(
        self,
        bus: EventBus,
        keys: str | Iterable[str],
        *,
        eval_keys: str | Iterable[str] = (),
        step_counter: Any = None,
        checkpoint: Any = None,
        restore: Restore = False,
        weights: Iterable[Any] | None = None,
        strategy: Any = None,
        check_stop_every_n_steps: int = 10,
        learning_rate: Any = None,
        optimizer: Any = None,
        serving: Any = None,
        batch_size: int | None = None,
    ) -> None:
        self._batch = optional_positive_int("batch_size", batch_size)
        if learning_rate is not None and optimizer is not None:
            raise ValueError("pass learning_rate= (a tf.Variable) or optimizer=, not both")
        if optimizer is not None and not hasattr(optimizer, "iterations"):
            raise TypeError(f"optimizer must be a Keras optimizer (got {optimizer!r})")
        own_rate = None if learning_rate is None else VariableRate(learning_rate, lambda: self._step)
        self._rate_source: Any = own_rate if own_rate is not None else optimizer
        self._rate: VariableRate | OptimizerRate | None = None
        if step_counter is not None and not callable(getattr(step_counter, "numpy", None)):
            raise TypeError(f"step_counter must be a variable or tensor with .numpy() (got {step_counter!r})")
        self.restore = check_restore(restore)
        if self.restore is not False and checkpoint is None:
            raise ValueError(f"restore={restore!r} needs checkpoint=tf.train.Checkpoint(...) to restore into")
        check_checkpoint(checkpoint)
        if strategy is not None and not callable(getattr(strategy, "run", None)):
            raise TypeError(f"strategy must be a tf.distribute.Strategy or None (got {strategy!r})")
        self._strategy = strategy
        self._values = ReplicaValues(strategy)
        self._check_every = positive_int("check_stop_every_n_steps", check_stop_every_n_steps)
        self._collective: CollectiveStop | None = None
        keys = check_fetch_keys(keys)
        if self._rate_source is not None and LEARNING_RATE_KEY not in keys:
            keys = (*keys, LEARNING_RATE_KEY)
        self._core = PublisherCore(bus, keys)  # registers the keys: checked when the loop begins
        eval_keys = check_fetch_keys(eval_keys, "eval_keys")
        self._eval = PublisherCore(bus, eval_keys, mode="eval") if eval_keys else None
        for core in (self._core, self._eval):
            if core is not None:
                core.key_advice = (
                    "LoopPublisher provides the keys it is given: keys= on training steps, eval_keys= as eval/<key>."
                )
        self.bus = bus
        self._counter = step_counter
        #: Offered to checkpoint sinks (``PublisherCore.offer_checkpoints``) while the loop runs; ``None``
        #: without ``checkpoint``.
        self.checkpoint_backend = TF2CheckpointBackend(checkpoint) if checkpoint is not None else None
        self._weights = VariableWeights(weights) if weights is not None else None
        self._export = loop_export(serving)
        self.restored_from: str | None = None
        self._step = 0
        self._last: StepValues | None = None
        self._stopped = False  # whether the loop was told it stops: no step may be counted after
        self._profiling = self._core.profiling  # steps in a profile window carry a step marker
        self._increment = 1  # steps the last call advanced: the next call's marker is for step + this
        self._short = 0  # examples short of full batches since the loop began (step(examples=...))
        if self._batch is not None:
            self._core.throughput.counter = self._count_examples

    @property
    def keys(self) -> tuple[str, ...]:
        return self._core.keys

    @property
    def global_step(self) -> int:
        """Completed training steps."""
        return self._step

    @property
    def should_stop(self) -> bool:
        """Whether a subscriber (or SIGTERM) asked to stop; end the loop when it is true.

        Under a multi-worker strategy: whether the workers agreed to stop (see the class).
        """
        collective = self._collective
        return self.bus.should_stop if collective is None else collective.agreed

    def _read_counter(self) -> int | None:
        return None if self._counter is None else int(self._counter.numpy())

    # -- lifecycle ---------------------------------------------------------------------------
    def begin(self) -> None:
        """Publish ``begin``, restore if asked, and publish ``session_created`` (``with loop:`` calls it)."""
        backend = self.checkpoint_backend
        if backend is not None:
            backend.attach()
            self._core.offer_checkpoints(backend, TENSORFLOW)
        self._core.offer_model(LoopModelView(self._weights, self._export))
        self._core.offer_profiler(TFProfiler())
        # A loop of numpy or of another framework imports no TensorFlow for this (5 s, and it may be
        # absent): TensorFlow's GPUs and allocator are read where the program already imported it.
        self._core.offer_machine(tensorflow_machine() if sys.modules.get("tensorflow") is not None else None)
        task = task_of_strategy(self._strategy)
        self._collective = None if task is None else CollectiveStop(self._strategy, task, self._check_every)
        self._values.multi_worker = task is not None
        source = self._rate_source
        if source is not None:
            self._rate = source if isinstance(source, VariableRate) else OptimizerRate(source)
            if isinstance(self._rate, OptimizerRate):
                self._rate.install()
            offered = self._core.offer_learning_rate(self._rate, publisher="LoopPublisher")
            if offered is not None and task is not None:
                offered.local = False  # applied where the workers agree (CollectiveStop)
        if task is not None:
            self._core.set_task(task)
        self._core.begin()
        if self._eval is not None:
            self._eval.begin()
        self.restored_from = restore_latest(self.bus, backend, self.restore) if backend is not None else None
        counted = self._read_counter()
        if counted is None:
            from hookbus._checkpoints._store import step_of

            counted = (step_of(self.restored_from) or 0) if self.restored_from else 0
        self._step = counted
        self._last = None
        self._short = 0
        self._core.count_local_step(0)
        self._core.session_created(self._step, True if self.restored_from else None, in_memory=True)
        if self._collective is not None:
            self._collective.reset(self._step)
            self._collective.agree(self._core, self._step, plan=True)  # a worker may begin stopped
        self._stopped = self.should_stop

    def step(self, values: StepValues, examples: int | None = None) -> bool:
        """One training step ran: publish it to the due subscribers; returns :attr:`should_stop`.

        Args:
            values: ``{key: tensor | number}`` for the keys, or a function returning it (called
                only on due steps).
            examples: The examples this call trained, where they differ from ``batch_size`` per step
                (a short last batch; default ``None``: ``batch_size`` per step). Needs ``batch_size``.

        Raises:
            KeyError: on a due step, when ``values`` lacks a key a due subscriber needs.
            TypeError: on a due step, for a value no sink can use (see the class).
            RuntimeError: after :attr:`should_stop` turned true (as the loop began, at a step or
                in an evaluation): that step is not counted, published or saved. Look at
                ``should_stop`` before training a step.
        """
        if self._stopped:
            raise RuntimeError(
                f"LoopPublisher.step() after the loop was asked to stop at step {self._step} "
                f"({self.bus.stop_reason}): this step is not counted, published or saved; look at "
                "loop.should_stop before training a step (if loop.should_stop: break)"
            )
        counted = self._read_counter()  # several optimizer steps per call: the counter knows
        step = self._step + 1 if counted is None else counted
        profiling = self._profiling
        if profiling.marking:  # the step ran between the last call and this one
            profiling.step_ended(step)
        self._increment = max(step - self._step, 1)
        if examples is not None:  # a short batch: what it lacks of full ones
            self._count_short(examples, step)
        plan = self._core.plan(step)
        bus = self.bus
        self._core.count_local_step(bus.local_step + 1)
        self._step = step
        if plan is None:
            self._core.advance(step)
        else:
            raw = values() if callable(values) else values
            self._core.advance(step)  # the step ran: a value refused while picked fails at it
            self._core.publish_step(plan, step, self._pick(raw, plan.keys, step))
        self._last = values
        stopping = self._core.should_stop()
        collective = self._collective
        if collective is not None and collective.due(self._step):
            collective.agree(self._core, self._step)
        self._stopped = stopping if collective is None else collective.agreed
        coming = self._step + self._increment
        # in a profile window only (docs/guides/sinks/profiling.md "Profiling")
        if coming >= profiling.first and not self._stopped:
            profiling.step_begins(coming)  # the next step runs until the next call
        return self._stopped

    def step_begins(self) -> None:
        """Optional: a training step begins now (call it just before the step's own code). Without it the
        time outside the steps (``Event.outside_secs``) counts hookbus's subscribers alone, since the loop's
        step is your own code; with it, also your loop's time between two steps (the batch's preparation,
        logging of your own): read after each due step, the step after it, and no other."""
        throughput = self._core.throughput
        if throughput.gap_open:
            throughput.step_starts()
        elif not throughput.sees_start:
            throughput.sees_start = True

    def _count_short(self, examples: int, step: int) -> None:
        batch = self._batch
        if batch is None:
            raise ValueError(
                f"step(examples={examples!r}) counts a short batch against LoopPublisher(batch_size=...): give the "
                "loop's batch size"
            )
        if not _is_count(examples):
            raise ValueError(f"examples must be an int >= 0 (got {examples!r})")
        self._short += batch * max(step - self._step, 1) - examples

    def _count_examples(self, step: int) -> int | None:
        """The examples trained since the loop began, through ``step``: ``batch_size`` per step, less what
        short batches lacked."""
        assert self._batch is not None
        return max(0, step - self._core.throughput.origin) * self._batch - self._short

    def _pick(self, raw: Mapping[str, Any], keys: Iterable[str], step: int) -> dict[str, Any]:
        rate = self._rate
        missing = [k for k in keys if k not in raw and (k != LEARNING_RATE_KEY or rate is None)]
        if missing:
            raise KeyError(
                f"step values at step {step} lack key(s) {missing} that LoopPublisher declared; got {sorted(raw)}"
            )
        convert = self._values.convert
        own = LEARNING_RATE_KEY if rate is not None else None  # read from the optimizer, not the values
        return {k: rate.used() if k == own and rate is not None else convert(k, raw[k], step) for k in keys}

    def evaluate(self, values: Mapping[str, Any]) -> None:
        """Publish one evaluation's (already aggregated) ``values`` as ``eval/<key>`` at the current step.

        Raises:
            RuntimeError: without ``eval_keys``.
        """
        if self._eval is None:
            raise RuntimeError("LoopPublisher.evaluate needs eval_keys=[...] at construction")
        if self._eval.eval_wanted():
            self._eval.publish_eval(self._step, self._pick(values, self._eval.keys, self._step))
        self._core.should_stop()  # a signal during the evaluation is recorded like any other
        if self._collective is not None:
            self._collective.agree(self._core, self._step)  # every worker evaluates at the same step
        self._stopped = self.should_stop

    def end(self) -> None:
        """Publish the ``at_end`` values (from the last step) and ``end`` (``with loop:`` calls it)."""
        final = self._core.final_plan(self._step)
        if final is not None:
            last = self._last() if callable(self._last) else (self._last or {})
            keys = tuple(k for k in final.keys if k in last or k == LEARNING_RATE_KEY)
            self._core.publish_final(final, self._pick(last, keys, self._step))
        self._core.end(self._step)
        if self._eval is not None:
            self._eval.end(self._step)
        if self.checkpoint_backend is not None:
            self.checkpoint_backend.detach()
        self._core.offer_profiler(None)
        self._core.offer_model(None)
        if isinstance(self._rate, OptimizerRate):
            self._rate.uninstall()
        self._rate = None
        self._core.offer_learning_rate(None)

    def __enter__(self) -> LoopPublisher:
        self.begin()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.end()


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
