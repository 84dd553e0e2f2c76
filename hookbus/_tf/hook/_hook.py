"""EventBusHook: the MonitoredSession publisher (the ``SessionRunHook`` interface)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from hookbus._checkpoints._store import step_of
from hookbus._contract._cluster import Task
from hookbus._contract._learning_rate import LEARNING_RATE_KEY
from hookbus._contract._publisher_keys import EVAL_PREFIX, check_mode
from hookbus._publishing._planner import Plan
from hookbus._publishing._publisher import PublisherCore
from hookbus._tf._checkpoint_tf1 import TENSORFLOW, SaverBackend
from hookbus._tf._elements import op_of, resolve, static_shape, step_after
from hookbus._tf._export_tf import GraphExport, check_serving
from hookbus._tf._import import require_tensorflow, with_framework_base
from hookbus._tf._learning_rate_tf import HookRate
from hookbus._tf._machine_tf import tensorflow_machine
from hookbus._tf._profiler_tf import RunMetadataTrace, TFProfiler
from hookbus._tf.hook._args import check_fetches, check_run_arguments, check_task, static_batch_size
from hookbus._tf.hook._eval import EvalRuns
from hookbus._tf.hook._eval_mean import check_aggregate
from hookbus._tf.hook._fetch import TrainFetches, key_sets
from hookbus._tf.hook._gate import start_gate
from hookbus._tf.hook._listeners import CheckpointListeners, check_listeners
from hookbus._tf.hook._model_view import GraphModelView
from hookbus._tf.hook._shared_stop import SharedStop
from hookbus._tf.hook._steps import StepEstimate

# The module, once a hook is made (hookbus._tf._import imports it on first use, not with hookbus).
tf: Any = None

if TYPE_CHECKING:
    from hookbus._bus._bus import EventBus

__all__ = ["EventBusHook"]

#: The step a run is planned for while the increment per run is unknown: every step rule is due.
_ANY_STEP = 1 << 62

# A tuple, not ``list | tuple | dict``: a union written in the call is rebuilt on every run.
_STRUCTURES = (list, tuple, dict)

#: What no run fetches: the quiet path's train op before one is known.
_NO_FETCH = object()


def _tensorflow(what: str) -> Any:
    global tf
    tf = require_tensorflow(what)
    return tf


class EventBusHook:
    """Publishes a MonitoredSession's lifecycle and fetched values on an :class:`EventBus`.

    Instances are ``tf.compat.v1.train.SessionRunHook`` instances; the base class joins when
    the first hook is made, so that ``import hookbus`` does not import TensorFlow.

    In train mode, a run that includes ``train_op`` is one training step. On steps where a
    subscriber is due the hook fetches the union of the due subscribers' keys and the step
    after the run: a read of the global step ordered after ``train_op`` (built in ``begin``),
    so ``event.step`` is exact. Other steps fetch nothing. Without ``train_op`` every run
    counts as one step (``steps_per_run`` steps), counted from a read of the global step at
    session creation.

    Steps that jump: a run may advance the global step by more than one (several optimizer
    steps per run, a ``while_loop`` of steps). Quiet runs are planned with the last exact step
    plus the increment per run, learned from every exact read; a due subscriber is checked
    again against the exact step before it is called. While the increment is unknown (not
    declared with ``steps_per_run``, not learned yet: the first run with a train op), the run
    is planned as if every step rule were due: it fetches their keys with the step, once, and
    the step decides who is called. A stop made on a run that read nothing (a signal, another
    thread, an evaluator) reads the step first, so the stop and the checkpoint saved on it
    carry the global step.

    In eval mode every run is one evaluation batch; values are aggregated over the session
    (``"mean"`` by default, or ``"final"``: read once at the end, for streaming metrics) and
    published at its end as ``eval/<key>``, with the training step the session restored.

    Args:
        bus: The bus to publish on.
        fetches: ``{key: tensor | variable | operation | tensor name}``. Default: none.
        train_op: The training op; strongly recommended in train mode (exact steps).
        mode: ``"train"`` (default) or ``"eval"``.
        aggregate: Eval aggregation, ``"mean"`` (default) or ``"final"``, or a mapping from key
            to either (keys not named use ``"mean"``).
        task: This process's :class:`hookbus.Task` in parameter-server training (default
            ``None``: read from ``TF_CONFIG`` when set, else one machine). With a task, only the
            subscribers whose ``runs_on`` includes it are planned and called, and a train-mode
            hook shares stops with the other workers through a flag on the parameter server.
        check_stop_every_n_steps: With a task, read the shared stop flag at least every n local
            steps (default 10; due steps read it too): every worker stops within n of its own
            steps after any worker asked to stop.
        batch_size: Eval mode: the number of examples in each evaluation batch (a tensor or its
            name, e.g. ``tf.shape(labels)[0]``); ``"mean"`` values are then weighted by it, as
            TensorFlow's streaming metrics and Keras's ``evaluate`` are, so a short last batch
            does not count as a full one. Default ``None``: every batch counts equally (exact
            only when all batches have the same size). Train mode: the examples each training
            step takes, a positive int, for examples per second (``Event.examples``: the steps
            since the session began times it; a short last batch counts as a full one). Default
            ``None``: the static batch dimension of the graph's one input iterator
            (``IteratorGetNext``) where it is known (``tf.data`` batched with
            ``drop_remainder=True``), else examples are not counted.
        final_fetches: Keys of ``fetches`` to read once more at the end for the ``at_end``
            subscribers (``FinalOpsHook``'s job: a streaming metric's result), declared safe to
            run then — they must not pull from the input pipeline. Default: none; the ``at_end``
            subscribers get the last values published and the step they came from.
        final_feed_dict: The ``feed_dict`` of that one read at the end (``FinalOpsHook``'s
            ``final_ops_feed_dict``: placeholders, or their names, to values). Default ``None``:
            no feeds.
        steps_per_run: Train mode: the most global steps one run of ``train_op`` advances
            (TensorFlow's ``steps_per_run``), when more than one. Quiet runs are planned that
            far ahead, so no step schedule fires late even when runs advance unevenly; a run
            that advances less only makes a due check early. Default ``None``: learned from the
            steps the hook reads (the first run fetches for every step rule, once, to learn it).
        learning_rate: Train mode: the rate the train op trains with, offered to the sinks that
            read or steer it and published as the key ``learning_rate`` (packed with the other
            scalars on due steps). A rate variable is set directly; a rate tensor (a schedule)
            gets a multiplier hookbus builds in ``begin`` (the published rate is their product).
            Default ``None``: no rate (a sink that steers one fails at begin, naming this).
        wait_for_step: A non-chief parameter-server worker waits for this global step before its
            first step, or for what a function of its :class:`hookbus.Task` returns
            (:func:`hookbus.staggered_start`); a stop ends the wait, published as ``waiting_for_step``.
            Default ``None``: no wait. The chief and one machine never wait, unless ``always_wait``.
        always_wait: Wait for ``wait_for_step`` wherever this hook runs, the chief and one machine
            too, as ``GlobalStepWaiterHook`` waits on any process it is given (what
            :func:`hookbus.from_hooks` makes of one): something else must move the step there
            (another process or thread training on the same variables), else only a stop or the
            timeout ends the wait. Default ``False``.
        wait_timeout_secs: The longest wait (default ``None``: as long as it takes).
        on_timeout: Past it, ``"raise"`` (default, :exc:`TimeoutError`) or ``"start"`` (train anyway).
        feed_fn: ``FeedFnHook``'s job: a function called before every run this hook sees, returning
            a ``feed_dict`` (placeholders to values) the run gets beside this hook's fetches.
            Default ``None``: no feeds (and no cost).
        serving_inputs: Train mode: ``{name: tensor | tensor name}`` of the
            model's inputs (placeholders, or any tensor a feed may replace) and of its
            predictions, both or neither: the ``serving_default`` signature of the SavedModel
            :class:`~hookbus.sinks.ExportSink` writes from the live session (the graph's
            variables as the session holds them). Default ``None``: the hook offers no export.
        serving_outputs: With ``serving_inputs``, above.
        checkpoint_listeners: Train mode: ``tf.compat.v1.train.CheckpointSaverListener``\\ s,
            called as ``CheckpointSaverHook`` calls its listeners, around every save of the
            :class:`~hookbus.sinks.CheckpointSink` on this bus, with this hook's session:
            ``begin()`` as the hook begins, ``before_save(session, step)`` before the checkpoint
            barrier, ``after_save(session, step)`` once the pointer names the checkpoint (returning
            ``True`` stops training at the end of the step), ``end(session, step)`` at the end,
            after the final save. Default: none.

    Raises:
        ValueError: at construction for malformed arguments; in ``begin()``, before
            the first step, for names not in the graph or elements of another graph.
        TypeError: Likewise, for an argument of the wrong type.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> EventBusHook:
        base = _tensorflow("EventBusHook").compat.v1.train.SessionRunHook
        instance: EventBusHook = object.__new__(with_framework_base(cls, base))
        return instance

    def __init__(
        self,
        bus: EventBus,
        fetches: Mapping[str, Any] | None = None,
        *,
        train_op: Any = None,
        mode: str = "train",
        aggregate: str | Mapping[str, str] = "mean",
        task: Task | None = None,
        check_stop_every_n_steps: int = 10,
        final_fetches: Iterable[str] = (),
        final_feed_dict: Mapping[Any, Any] | None = None,
        batch_size: Any = None,
        steps_per_run: int | None = None,
        learning_rate: Any = None,
        wait_for_step: int | Callable[[Task], int] | None = None,
        always_wait: bool = False,
        wait_timeout_secs: float | None = None,
        on_timeout: str = "raise",
        feed_fn: Callable[[], Mapping[Any, Any]] | None = None,
        serving_inputs: Mapping[str, Any] | None = None,
        serving_outputs: Mapping[str, Any] | None = None,
        checkpoint_listeners: Iterable[Any] = (),
    ) -> None:
        _tensorflow("EventBusHook")
        listeners = check_listeners(checkpoint_listeners)
        if feed_fn is not None and not callable(feed_fn):
            raise TypeError(f"feed_fn must be a function returning a feed_dict, or None (got {feed_fn!r})")
        self._feed_fn = feed_fn
        if feed_fn is not None:  # an instance attribute: the hook without feeds keeps its plain before_run
            self.before_run = self._before_run_feeding  # type: ignore[method-assign]
        mode = check_mode(mode, ("train", "eval"))  # a test evaluation is Keras's evaluate (EventBusCallback)
        self._fetches, graph_rate = check_fetches(tf, fetches, mode=mode, learning_rate=learning_rate)
        keys = [*self._fetches, LEARNING_RATE_KEY] if graph_rate is not None else self._fetches.keys()
        self._core = PublisherCore(bus, keys, mode=mode)
        self._core.key_advice = (
            "An EventBusHook provides the keys of its fetches (an eval hook's as eval/<key>); construct every "
            "publisher (an eval EventBusHook too) before the first session starts."
        )
        steps_per_run, self._final_fetches = check_run_arguments(
            tf,
            self._core.mode,
            train_op=train_op,
            steps_per_run=steps_per_run,
            batch_size=batch_size,
            fetches=self._fetches,
            final_fetches=final_fetches,
        )
        if final_feed_dict is not None and not isinstance(final_feed_dict, Mapping):
            raise TypeError(
                f"final_feed_dict must be a feed_dict (placeholders to values) or None (got {final_feed_dict!r})"
            )
        if final_feed_dict is not None and not self._final_fetches:
            raise ValueError("final_feed_dict feeds the read of final_fetches at the end: give final_fetches too")
        self._final_feed = dict(final_feed_dict) if final_feed_dict is not None else None
        # A train hook's examples per step: declared, else the graph's input iterator's static batch (in begin).
        self._declared_batch: int | None = batch_size if self._core.mode == "train" else None
        self._batch: int | None = None
        self._throughput = self._core.throughput
        self._throughput.sees_start = self._core.mode == "train"  # before_run: a training step's start
        self._estimate = StepEstimate(steps_per_run)
        self._exact = False  # whether the last training run read the step
        self._resumed_at: int | None = None  # a restore mark's step read before the step went back
        self._session: Any = None
        self._step_args: Any = None  # a read of the step alone: learns the increment per run
        self._train_op_arg = train_op
        eval_batch = batch_size if self._core.mode == "eval" else None  # a train hook's counts examples
        self._evals = EvalRuns(check_aggregate(aggregate, self._fetches), eval_batch)  # an eval hook's runs
        self.bus = bus
        self._planned: Plan | None = None
        self._traced = False  # whether the run in progress is traced in full (Profiling.trace_run)
        self._trained_in_session = False  # whether the session ran a training run yet: its first is never traced
        self._training_run = self._quiet = False  # the run in progress: a training run, a quiet one
        # The fast path: the train op a run fetched alone, once the increment per run is known (train mode,
        # no shared stop); such a run is a training run, and a quiet one plans nothing and fetches nothing.
        self._quiet_fetch: Any = _NO_FETCH
        self._step_after: Any = None
        self._global_step: Any = None
        self._reads_step = False  # whether the global step can be read (set in begin)
        self._train_ops: frozenset[Any] = frozenset()
        self._elements: dict[str, Any] = {}
        self._train_fetches = TrainFetches()  # due steps' fetches: scalars packed in one tensor
        self._stop_before_eval = False
        self.task = task = check_task(task)
        self._rate = HookRate(graph_rate, task) if graph_rate is not None else None  # the rate across sessions
        self._shared_stop = SharedStop(task, check_stop_every_n_steps) if task and self.mode == "train" else None
        self._stop_args: Any = None
        self._gate = start_gate(
            wait_for_step,
            timeout_secs=wait_timeout_secs,
            on_timeout=on_timeout,
            task=task,
            mode=self.mode,
            always=always_wait,
        )
        # Train mode offers its session to checkpoint sinks (through the core, in begin, with
        # TensorFlow's checkpoint layout as the store).
        self.checkpoint_backend = SaverBackend() if self._core.mode == "train" else None
        self._profiling = self._core.profiling  # steps in a profile window carry a step marker
        self._serving = check_serving(serving_inputs, serving_outputs, mode=self._core.mode)
        self._export: GraphExport | None = None  # made in begin (its Saver), once per graph
        if listeners:
            if self._core.mode != "train":
                raise ValueError("checkpoint_listeners are a train-mode hook's: an eval hook saves no checkpoint")
            # Attached now, as the hook's keys are known now: a sink of its own on the same bus.
            self.checkpoint_listeners = CheckpointListeners(listeners, self._live_session, bus.request_stop)
            bus.attach(self.checkpoint_listeners)

    @property
    def _step(self) -> int:
        """The step after the last run (the estimate's: exact when the last read was)."""
        return self._estimate.step

    @property
    def mode(self) -> str:
        return self._core.mode

    @property
    def keys(self) -> tuple[str, ...]:
        return self._core.keys

    # -- SessionRunHook ------------------------------------------------------------------------
    def begin(self) -> None:
        self._quiet_fetch = _NO_FETCH  # the graph's train op is found again on its first run
        graph = tf.compat.v1.get_default_graph()
        self._elements = {k: resolve(graph, "fetch", v) for k, v in self._fetches.items()}
        self._evals.begin(graph, self._elements)
        prefix = EVAL_PREFIX if self._core.mode == "eval" else ""
        shapes = {prefix + k: static_shape(e) for k, e in self._elements.items()}
        self._core.shapes = {k: shape for k, shape in shapes.items() if shape is not None}
        self._global_step = tf.compat.v1.train.get_global_step(graph)
        if self._rate is not None:  # before the due-step fetches are packed: the rate is one of them
            self._core.shapes[LEARNING_RATE_KEY] = ()
            offer = self._core.offer_learning_rate
            self._elements[LEARNING_RATE_KEY] = self._rate.begin(tf, graph, self._global_step, offer)
        if self._train_op_arg is not None:
            train_op = resolve(graph, "train_op", self._train_op_arg)
            read = step_after(tf, graph, train_op, self._global_step, self._step_after)  # ordered after train_op
            self._train_ops = frozenset({train_op, op_of(train_op)})
            if read is not self._step_after:
                self._step_after = read
                self._estimate.forget()  # another train op: its increment is learned anew
            self._step_args = tf.compat.v1.train.SessionRunArgs({"step": self._step_after})
        if self._shared_stop is not None:
            self._shared_stop.build(tf, graph, self._global_step)
            # Other workers move the global step between this worker's runs: every flag check
            # also reads the exact step (after the train op when there is one), so the estimate
            # made on quiet steps is corrected at least every check_stop_every_n_steps.
            step_read = self._step_after if self._step_after is not None else self._global_step
            self._stop_args = tf.compat.v1.train.SessionRunArgs({"stop": self._shared_stop.read, "step": step_read})
        if self._gate is not None:  # it polls the shared flag, if any, and the step alone (not the train op)
            self._gate.build(self._shared_stop.read if self._shared_stop is not None else None, self._global_step)
        # A read ordered after the train op, or the shared stop's global step (which build() requires):
        # a stop made on a quiet run and the end event carry the global step read from the graph.
        self._reads_step = self._step_after is not None or self._shared_stop is not None
        if self.checkpoint_backend is not None:
            self.checkpoint_backend.prepare()  # a Saver must be built before the graph is finalized
            # In parameter-server training the step moves while the chief saves: the backend
            # names each checkpoint after the global step it really holds.
            self.checkpoint_backend.step_variable = self._global_step if self._shared_stop is not None else None
            self._core.offer_checkpoints(self.checkpoint_backend, TENSORFLOW)
            self._core.offer_profiler(TFProfiler())
            self._profiling.offer_run_traces(True)  # a run traced in full on request (ProfilerHook's timelines)
        if self._core.mode == "train":  # the model sinks see: graph, variables, SavedModel through the session
            self._core.offer_machine(tensorflow_machine())
            if self._serving is not None and (self._export is None or self._export.graph is not graph):
                self._export = GraphExport(graph, *self._serving, session=self._live_session)
            trainable = list(graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES))
            self._core.offer_model(GraphModelView(graph, self._live_session, trainable, self._export))
        if self.task is not None:
            self._core.set_task(self.task)
        if self._core.mode == "train":
            self._batch = self._declared_batch or static_batch_size(tf, graph)
            self._throughput.counter = self._count_examples if self._batch is not None else None
            core, stop = self._core, self._shared_stop.read if self._shared_stop is not None else None
            wanted = key_sets(core.local_subscribers(), core.keys, core.bus_keys)
            self._train_fetches.build(tf, graph, self._elements, wanted, core.keys, self._step_after, stop)
        self._core.begin()

    def _count_examples(self, step: int) -> int | None:
        """The examples this hook trained since its session began, through ``step``: the batch size times
        the steps since the resume point (under parameter servers, where the other workers move the step
        too, times this worker's own runs, each ``steps_per_run`` batches as declared, else one: the
        increment the hook learns from the shared step counts the other workers' runs too)."""
        batch = self._batch
        if batch is None:
            return None
        stop = self._shared_stop
        if stop is not None:
            return stop.local_step * batch * (self._estimate.declared or 1)
        return max(0, step - self._throughput.origin) * batch

    def _live_session(self) -> Any:
        """The open session, ``None`` outside one: what the model view and its export read."""
        return self._session

    def after_create_session(self, session: Any, coord: Any) -> None:
        self._estimate.start(int(session.run(self._global_step)) if self._global_step is not None else 0)
        self._session = session
        self._trained_in_session = False
        shared = self._shared_stop
        if shared is not None and shared.task.is_chief and self._step > 0:
            # First: the workers, which see their step go back now, wait for this mark to cut their files.
            shared.mark_restore(session, self._restored_step())
        self._evals.start()
        # A stop requested before an evaluation began (the training's) must not cut it short.
        self._stop_before_eval = self._core.mode == "eval" and self.bus.should_stop
        if self.checkpoint_backend is not None:
            self.checkpoint_backend.attach_session(session)
        if self._rate is not None:
            self._rate.attach_session(session)
        self._core.session_created(self._step)
        if shared is not None:
            shared.session_created(session, self._core.stops, first=self._core.sessions == 1)
        if self._gate is not None:
            shared, stops = self._shared_stop, self._core.stops

            def observe(value: Any) -> None:
                if shared is not None:
                    shared.observe(value, stops)

            step = self._gate.wait_in(session, observe, lambda: stops.requested, self._core.publish_waiting)
            self._core.advance(self._estimate.correct(step))
            self._core.should_stop()  # a signal that ended the wait is published now, at the step read
        if self._core.mode == "train" and self.bus.should_stop:
            # Stopped as the session began (a resume at or past StopAtStepSink's step): run no
            # step at all. StopAtStepHook ran one more, which put a step past the target on disk.
            coord.request_stop()

    def _is_training_run(self, run_context: Any) -> bool:
        if not self._train_ops:
            return True
        fetches = run_context.original_args.fetches
        if not isinstance(fetches, _STRUCTURES):
            return fetches in self._train_ops
        return any(f in self._train_ops for f in tf.nest.flatten(fetches))

    def before_run(self, run_context: Any) -> Any:
        if self._throughput.gap_open:  # the step after a due one: the time outside it ends here
            self._throughput.step_starts()
        if run_context.original_args.fetches is self._quiet_fetch:  # the train op alone, known increment
            coming = self._estimate.coming
            if self._core.quiet(coming):
                self._quiet = True  # a training run that is due for nothing
                return None
            self._quiet, self._training_run = False, True
            return self._plan(coming, learn=False)
        self._quiet = False
        if self._core.mode == "eval":
            return self._evals.run_args(tf, self._core.eval_wanted)
        self._planned = None
        self._training_run = self._is_training_run(run_context)
        if not self._training_run:
            return None
        fetches = run_context.original_args.fetches
        if self._estimate.known and self._shared_stop is None and not isinstance(fetches, _STRUCTURES):
            self._quiet_fetch = fetches  # the train op alone (immutable): its next runs skip all this
        # Once per graph, while the increment is unknown, the step is read (planned one step per
        # run, a stop step or a save would come up to k times late), and every step rule is
        # planned as if due: the step read after the run decides who is.
        return self._plan(self._estimate.coming, learn=not self._estimate.known and self._step_after is not None)

    def _before_run_feeding(self, run_context: Any) -> Any:
        """``before_run`` with ``feed_fn``'s feeds added to every run (``FeedFnHook``)."""
        args = type(self).before_run(self, run_context)
        assert self._feed_fn is not None
        feeds = self._feed_fn()
        if not isinstance(feeds, Mapping):
            raise TypeError(f"feed_fn must return a feed_dict mapping placeholders to values (got {feeds!r})")
        if args is None:
            return tf.compat.v1.train.SessionRunArgs(None, feed_dict=dict(feeds))
        return tf.compat.v1.train.SessionRunArgs(
            args.fetches, feed_dict={**(args.feed_dict or {}), **feeds}, options=args.options
        )

    def _plan(self, coming: int, *, learn: bool) -> Any:
        """The fetches of a training run planned for step ``coming`` (``learn``: as if all were due)."""
        if coming >= self._profiling.first:  # in a profile window only (docs/guides/sinks/profiling.md "Profiling")
            self._profiling.step_begins(coming)
        plan = self._planned = self._core.plan(_ANY_STEP if learn else coming)
        if plan is None:
            if self._shared_stop is not None and self._shared_stop.due():
                return self._stop_args
            return self._step_args if learn else None
        args = self._train_fetches.args(plan.keys)
        # A due sink asked, from before_run, for a full trace. Never of a session's first run (it traces graph
        # building, not training; ProfilerHook's rule too), nor of the run that learns the increment (planned as
        # if every rule were due).
        wanted = self._profiling.run_trace_wanted
        self._traced = wanted and not learn and self._trained_in_session
        if wanted and not self._traced:
            self._profiling.run_traced(None)
        if self._traced:
            options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
            return tf.compat.v1.train.SessionRunArgs(args.fetches, feed_dict=args.feed_dict, options=options)
        return args

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self._quiet:
            self._exact, self._trained_in_session = False, True
            if self._core.passed(self._estimate.ran(None)):
                return
            self._act_on_stops(run_context, self._reads_step)
            return
        if self._core.mode == "eval":
            self._evals.add(run_values.results)
        elif self._training_run:
            self._after_training_run(run_context, run_values.results, run_values.run_metadata)
        self._act_on_stops(run_context, self._training_run and not self._exact and self._reads_step)

    def _act_on_stops(self, run_context: Any, estimated: bool) -> None:
        """Act on the stops recorded since the last step (``estimated``: the step after this run
        was not read, so it is read before a stop is published)."""
        stopping = self._core.should_stop(self._read_step if estimated else None)
        if self._shared_stop is not None and stopping:
            self._shared_stop.announce(run_context.session, self._core.stops)
        if stopping and not self._stop_before_eval:
            run_context.request_stop()

    def _restored_step(self) -> int:
        """The step of the checkpoint the chief's session restored: the latest of the bus's checkpoint
        directory at or below the step read (the workers moved the step on since the restore), else
        the step read."""
        for directory in sorted({d for s in self.bus.sinks if (d := s.checkpoint_directory) is not None}):
            steps = [s for s in map(step_of, TENSORFLOW.checkpoints(directory)) if s is not None and s <= self._step]
            if steps:
                return max(steps)
        return self._step

    def _after_training_run(self, run_context: Any, results: Any, metadata: Any = None) -> None:
        self._trained_in_session = True
        stop = self._shared_stop
        restored = None  # the checkpoint step of a restore the chief marked, read with this run
        if stop is not None:
            stop.local_step += 1
            self._core.count_local_step(stop.local_step)
            restored = stop.restore_seen(results["stop"]) if results and "stop" in results else None
        plan = self._planned
        estimate = self._estimate
        if plan is not None:
            step, values = self._train_fetches.unpack(plan.keys, results, estimate.coming)
            exact = self._exact = self._step_after is not None
            estimate.ran(step if exact else None)
            if exact and estimate.went_back:
                self._rewind(restored, step - 1)  # this run's step is the restored timeline's first
            else:
                self._marked(restored, exact)
            if self._profiling.marking:
                self._profiling.step_ended(step)
            if self._traced:
                self._traced = False
                self._profiling.run_traced(RunMetadataTrace(step, metadata) if metadata is not None else None)
            try:
                self._core.publish_step(plan, step, values)
            except Exception as error:
                if stop is not None:  # a raising NaN guard on one worker stops the others too
                    stop.announce(run_context.session, self._core.stops, f"{type(error).__name__}: {error}")
                raise
        else:
            # A stop-flag check or the learning read reads the step; quiet runs estimate it.
            exact = self._exact = bool(results) and "step" in results
            step = estimate.ran(int(results["step"]) if exact else None)
            if self._profiling.marking:
                self._profiling.step_ended(step)
            if not (exact and estimate.went_back):
                self._marked(restored, exact)
            self._advance(step, exact, restored)
        if stop is not None and results and "stop" in results:  # a read of the step alone has no flag
            stop.observe(results["stop"], self._core.stops)

    def _read_step(self) -> int:
        """The global step read now (a variable read: no input is consumed), for a stop published on a run
        that read nothing: every step that leaves the publisher is the global step read from the graph."""
        step = self._estimate.correct(int(self._session.run(self._global_step)))
        self._advance(step, True)
        return step

    def _advance(self, step: int, exact: bool, restored: int | None = None) -> None:
        """The bus's step follows ``step``; one read ``exact`` below the read before it is a rewind
        (``restored``: the checkpoint step of a restore mark read with it)."""
        if exact and self._estimate.went_back:
            self._rewind(restored, step)
        else:
            self._core.advance(step)

    def _marked(self, restored: int | None, exact: bool) -> None:
        """A run whose step read did not go back read ``restored``, a restore mark's checkpoint step
        (``None``: no new mark): the resume point, where the chief restored under this worker's
        timeline. Read by a run that read no step (``exact`` false), the step's going back under that
        restore may still come, and is then not a second resume point."""
        if restored is not None:
            self._core.rewound(restored)
        if exact or restored is not None:
            self._resumed_at = None if exact else restored

    def _rewind(self, restored: int | None, step: int) -> None:
        """The step read went back under this worker (``step``: the restored timeline's last step
        before this run): a chief restored a checkpoint. One resume point for the restore, at the
        checkpoint's step its mark names (``restored``, read with this run, else waited for: the
        chief writes it as its session begins), so that no row this worker publishes on the
        restored timeline is cut by a later mark; without a mark in time, ``step``."""
        if restored is None and self._resumed_at is not None:
            self._resumed_at = None  # the mark came first, and its resume point stands
            self._core.advance(step)
            return
        self._resumed_at = None
        stop, session = self._shared_stop, self._session
        if restored is None and stop is not None and session is not None:
            restored = stop.await_restore(session, self._core.stops)
        self._core.rewound(min(restored, step) if restored is not None else step)

    def end(self, session: Any) -> None:
        if self._core.mode == "eval":
            self._end_eval(session)
            return
        if self._reads_step:
            # The end event carries the global step read now (a variable read: no input is
            # consumed); in parameter-server training other workers moved it since the last read.
            self._advance(self._estimate.correct(int(session.run(self._global_step))), True)
        if self._shared_stop is not None and self.bus.should_stop:
            self._shared_stop.announce(session, self._core.stops)
        final = self._core.final_plan(self._step)
        if final is not None:
            # No fetch here (test_finite_input.py, README "Guarantees": inputs that end): a finite input that
            # just ended must not be asked for another batch, and values never published must not appear at the
            # end. The at_end subscribers get the last published values and their step; only final_fetches,
            # declared safe to run now, are read at the end.
            step, values = self._core.last_values() or (self._step, {})
            if self._final_fetches:
                read = {k: self._elements[k] for k in self._final_fetches}
                values = {**values, **session.run(read, feed_dict=self._final_feed)}
                step = self._step
            self._core.publish_final(final, {k: v for k, v in values.items() if k in final.keys}, step=step)
        self._core.end(self._step)
        self._session = None
        self._core.offer_model(None)
        if self.checkpoint_backend is not None:
            self.checkpoint_backend.attach_session(None)  # the session closes after end()
            self._core.offer_profiler(None)
            self._profiling.offer_run_traces(False)
        if self._rate is not None:
            self._rate.attach_session(None)

    def _end_eval(self, session: Any) -> None:
        if self._core.eval_wanted():
            values = self._evals.values(session)  # :mod:`hookbus._tf.hook._eval`
            if values:
                self._core.publish_eval(self._step, values)
        self._core.end(self._step)
