"""EventBusCallback: the Keras publisher (a ``keras.callbacks.Callback`` for ``fit`` and ``evaluate``)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

from hookbus._contract._learning_rate import LEARNING_RATE_KEY
from hookbus._contract._model import EpochProgress
from hookbus._contract._publisher_keys import check_fetch_keys
from hookbus._publishing._publisher import PublisherCore
from hookbus._rules._validate import flag, optional_positive_int, positive_int
from hookbus._tf._checkpoint_tf1 import TENSORFLOW
from hookbus._tf._checkpoint_tf2 import Restore, TF2CheckpointBackend, check_checkpoint, check_restore, restore_latest
from hookbus._tf._collective import CollectiveStop, task_of_strategy
from hookbus._tf._import import require_keras, require_tensorflow, with_framework_base
from hookbus._tf._learning_rate_tf import OptimizerRate
from hookbus._tf._machine_tf import tensorflow_machine
from hookbus._tf._profiler_tf import TFProfiler
from hookbus._tf.keras._examples import KerasExamples
from hookbus._tf.keras._hold import HeldWork
from hookbus._tf.keras._logs import EpochKeys, LogChecks, TestKeys, epoch_values, finite_logs, validation_values
from hookbus._tf.keras._model_view import KerasModelView
from hookbus._tf.keras._resume import cut_short, pass_over, prepare_restore, restore_train_function, start_epoch

if TYPE_CHECKING:
    from hookbus._bus._bus import EventBus

__all__ = ["EventBusCallback"]

logger = logging.getLogger("hookbus")


class EventBusCallback:
    """Publishes a Keras ``fit`` / ``evaluate`` on an :class:`EventBus`; a ``keras.callbacks.Callback``.

    The same lifecycle as :class:`EventBusHook`: ``begin`` and ``session_created`` (at the step
    ``model.optimizer.iterations`` holds, which a restored checkpoint carries) at
    ``on_train_begin``; ``after_run`` on the batches where a subscriber is due, with
    ``event.step`` the ``iterations`` after the batch (with ``steps_per_execution > 1`` Keras
    reports once per execution and schedules fire when the step crosses their multiples); the
    ``at_end`` values and ``end`` at ``on_train_end``. On a batch where nothing is due the
    callback compares two ints and returns (and tests a flag as the batch begins): it reads no
    logs and sends nothing.

    Values come from Keras's logs: **batch logs are running means over the epoch so far**, not
    the batch's own values. Keras 3 on the TensorFlow backend converts every batch's logs to
    Python floats whenever a callback overrides ``on_train_batch_end`` (its asynchronous
    dispatch is off then; the progress bar does the same), so that cost is Keras's, not ours.

    Validation is published once per evaluation, as ``mode="eval"`` with keys ``eval/<key>`` at
    the training step evaluated, from ``on_epoch_end``'s ``val_*`` values (fit's validation also
    fires ``on_test_end``, which is ignored then).

    Test evaluations: a ``model.evaluate(..., callbacks=[cb])`` that is not ``fit``'s validation
    (after ``fit``, between two, without one, inside or outside ``with bus:``) is published once,
    from ``on_test_end``, as ``mode="test"`` with keys ``test/<key>`` (the declared keys as Keras
    logs them; one it does not log is a ``ValueError`` naming what it logs) at the model's current
    training step (``optimizer.iterations``; 0 for a model never trained). It reaches the sinks
    that record evaluations and subscribers with ``keys=None`` or naming a ``test/`` key (the
    ``test/`` keys are known to the bus whenever this callback is, so ``keys=["test/loss"]`` passes
    the key check under ``fit`` too); never a sink that steers training (checkpoints, early
    stopping, the NaN guard, stop-at-step, the learning rate). It creates no session, so no sink
    takes it for a resume point: ``CSVSink`` writes it to ``<stem>.test.csv``, ``TensorBoardSink``
    to its ``test`` run (``layout="keras"``: ``validation/evaluation_<name>_vs_iterations`` at the
    step, what Keras's ``TensorBoard`` writes), and no training or validation row is replaced.
    Outside ``with bus:`` it opens a run of its own, like a ``fit`` without ``with bus:``, and
    flushes what it wrote before ``evaluate`` returns. With no subscriber for it, nothing happens.
    ``predict`` publishes nothing.

    Epoch events: every ``every_n_epochs`` epochs ``on_epoch_end`` publishes an ``after_run``
    with ``mode="epoch"``, ``values`` = ``{"epoch": <0-based index>, "epoch/<name>": ...}`` for
    every value of Keras's epoch logs (``epoch/loss``, ``epoch/val_loss``, ...). Only
    subscribers that opt in receive them (one rule for every publisher):
    those whose ``keys`` name an ``epoch/`` key, and sinks whose ``receives_epochs`` is true
    (``CSVSink(path, epochs=True)`` writes CSVLogger-like rows). Others, ``keys=None`` included,
    never see them.

    Keys: Keras knows its log names only after the first batch, so they are declared here
    (``keys``, default ``("loss",)``; metric names as Keras logs them, e.g. ``"accuracy"``).
    The bus checks every subscriber's keys against them when training begins, and the first
    batch checks that Keras logs every declared key (a ``ValueError`` naming what it logs).

    Resume: with ``restore=True`` the callback restores, at ``on_train_begin``, the latest
    checkpoint of the attached :class:`~hookbus.sinks.CheckpointSink`'s directory (or of the
    directory ``restore`` names) into the model and optimizer; steps continue from the restored
    ``iterations``, and sinks resume there (CSV drops rows after it, sink states come back).
    A model Keras builds at its first batch (a ``Sequential`` without ``Input``) needs nothing
    more: with an empty directory ``fit`` just starts; from a checkpoint, its variables take the
    restored values as Keras makes them, before the first step's update (a restore after it
    would train that batch from fresh weights and lose it from the resumed epoch).
    A run killed and restarted with the same ``fit`` and ``restore=True`` writes every step
    exactly once. ``fit`` continues at the epoch of the restored step (``step // steps_per_epoch``,
    as Keras's ``BackupAndRestore`` does; exact when checkpoints fall on epoch ends; with an
    input of unknown length pass ``initial_epoch`` yourself), and a stop asked for at the resume
    (early stopping whose patience ran out before the checkpoint) ends ``fit`` before another
    epoch. A checkpoint from the middle of an epoch (a stop there saved it) resumes after its
    last trained batch: Keras reads the batches before it without training on them (other
    callbacks see their batch ends, with empty logs), so no step is trained twice and the run
    ends where an uninterrupted one ends. An epoch a stop cut short publishes neither its
    validation nor its epoch event; the resume completes it and publishes them once. An epoch
    cut short with a non-finite value in its logs (``NanGuardSink(on_nan="stop")``, as Keras's
    ``TerminateOnNaN``) is over (no checkpoint holds a non-finite step): it publishes both, as
    Keras's ``CSVLogger`` writes its row.

    A save at an epoch's last step (and whatever else subscribers defer at a batch) runs once
    Keras moves on: at the next batch, or after that epoch's validation and epoch events, which
    belong to the same step, so the checkpoint's barrier covers them (with an input of unknown
    length Keras asks for one more batch first, and the save runs then: pass ``steps_per_epoch``).

    The model's weights are offered to sinks in memory (``EarlyStoppingSink(restore_best=True)``
    puts the best ones back at train end, as ``EarlyStopping(restore_best_weights=True)``).

    Stop requests (early stopping, stop-at-step, SIGTERM) set ``model.stop_training``.

    The learning rate: the optimizer's rate is offered to the sinks that read or steer it
    (``SinkContext.learning_rate``; with a ``LearningRateSchedule``, hookbus's multiplier on top
    of the schedule instead of Keras's ``TypeError``), and published as the key
    ``learning_rate`` on due steps when ``keys`` declares it (``keys=["loss", "learning_rate"]``):
    the rate that trained the step, read from the optimizer, not from the logs.

    Multi-worker: when the model was built under a ``MultiWorkerMirroredStrategy`` with two or
    more workers, the bus runs as this worker's :class:`hookbus.Task` (chief-only sinks on the
    chief alone; checkpoints by TensorFlow's rule, see :class:`~hookbus.sinks.CheckpointSink`),
    and a stop any worker asks for is agreed by all-reducing the workers' stop flags each time
    the step crosses a multiple of ``check_stop_every_n_steps`` and at every epoch end;
    ``model.stop_training`` is set on every worker at that same step, so none is left waiting
    in an all-reduce. (Keras 3.15's own ``fit`` fails under a multi-worker
    ``MultiWorkerMirroredStrategy`` before the first batch, keras-team/keras#20585; the
    callback is ready for a Keras that runs it.)

    Args:
        bus: The bus to publish on.
        keys: Keras log names to publish (default ``("loss",)``).
        every_n_epochs: Publish an epoch event every n epochs (default 1).
        restore: ``False`` (default), ``True`` (the CheckpointSink's directory) or a directory.
        checkpoint: The ``tf.train.Checkpoint`` to save and restore (default ``None``:
            ``tf.train.Checkpoint(model=model, optimizer=model.optimizer)``, made at train begin, and
            kept for later fits of the same model and optimizer).
        check_stop_every_n_steps: Under a multi-worker strategy, agree on stopping each time the
            step crosses a multiple of n (default 10).
        batch_size: The examples in each batch, for examples per second (``Event.examples``; default
            ``None``: the model's input's static batch dimension where it has one, else learned from
            Keras's loss tracker at the first due batch). A short last batch of an epoch is counted by
            what it holds: at that batch, and at each epoch's end, the callback reads how many examples
            Keras's loss tracker (the ``loss`` entry of ``model.metrics``, which Keras weights by each
            batch's size) counted this epoch; a model whose training step updates no loss tracker counts
            every batch as full.
        close_bus: Close ``bus`` (``bus.close()``) when each ``fit`` and standalone ``evaluate``
            ends, so its files are closed and its outputs free for the next: for a bus nothing
            else publishes on and no ``with bus:`` holds, the one :func:`hookbus.from_keras` makes
            (default ``False``: the run stays open until ``bus.close()``, ``with bus:`` or exit).

    Raises:
        ValueError, TypeError: at construction for malformed arguments; at train begin for an
            uncompiled model or a ``restore=True`` without a checkpoint sink.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> EventBusCallback:
        base = require_keras(cls.__name__).callbacks.Callback
        instance: EventBusCallback = object.__new__(with_framework_base(cls, base))
        return instance

    def __init__(
        self,
        bus: EventBus,
        keys: str | Iterable[str] = ("loss",),
        *,
        every_n_epochs: int = 1,
        restore: Restore = False,
        checkpoint: Any = None,
        check_stop_every_n_steps: int = 10,
        close_bus: bool = False,
        batch_size: int | None = None,
    ) -> None:
        require_keras("EventBusCallback").callbacks.Callback.__init__(self)
        self._declared_batch = optional_positive_int("batch_size", batch_size)
        self.every_n_epochs = positive_int("every_n_epochs", every_n_epochs)
        self._check_every = positive_int("check_stop_every_n_steps", check_stop_every_n_steps)
        self._collective: CollectiveStop | None = None
        self.restore = check_restore(restore)
        flag("close_bus", close_bus)
        self._close_bus = close_bus
        self._checkpoint = check_checkpoint(checkpoint)
        self._made: tuple[Any, Any, Any] | None = None  # the default checkpoint's model, optimizer, checkpoint
        declared = check_fetch_keys(keys)
        logged = tuple(k for k in declared if k != LEARNING_RATE_KEY)  # Keras's log names
        self._core = PublisherCore(bus, declared)  # registers the keys: checked when training begins
        self._eval = PublisherCore(bus, logged, mode="eval")  # fit's validation
        self._test = PublisherCore(bus, logged, mode="test")  # evaluate outside fit
        self._core.key_advice = self._eval.key_advice = self._test.key_advice = (
            "EventBusCallback provides the Keras log names its keys= declares, e.g. "
            "EventBusCallback(bus, keys=['loss', 'accuracy']): each on training steps, as eval/<name> from the "
            "validation (Keras's val_<name>), as test/<name> from evaluate outside fit, as epoch/<name> in epoch "
            "events."
        )
        self._core.register(EpochKeys(logged))  # a publisher's side of the bus
        self._core.register(TestKeys(logged))  # test/<key> known in every run, evaluated or not
        self._rate: OptimizerRate | None = None
        self.bus = bus
        #: Offered to checkpoint sinks (``PublisherCore.offer_checkpoints``) from train begin to train end.
        self.checkpoint_backend = TF2CheckpointBackend(checkpoint)
        self.restored_from: str | None = None
        self._step = 0
        self._epoch_start = 0
        self._held = HeldWork(self._core.hold, self._core.release)
        self._resume_batch = 0  # batches of the resumed epoch trained before the restart
        self._skipped = False  # the batch Keras just reported was passed over, not trained
        self._deferred = False  # a restore into a model Keras builds at its first batch, to check after it
        self._batches = 0  # batches Keras ran of the current epoch (passed over ones included)
        self._epoch: int | None = None  # the epoch being trained (0-based), from its on_epoch_begin
        self._in_fit = False
        self._fit_frame: tuple[int, CodeType] | None = None  # the running fit's frame (its id and code)
        self._set_initial_epoch = False
        self._checks = LogChecks(logged)
        self._logs: Mapping[str, Any] = {}
        self._iterations: Any = None
        self._profiling = self._core.profiling  # batches in a profile window carry a step marker
        self._per_execution = 1  # steps one batch call trains (compile's steps_per_execution)
        self._throughput = self._core.throughput
        self._throughput.sees_start = True  # on_train_batch_begin: a training step's start
        self._throughput.counter = self._count_examples
        self._examples = KerasExamples()

    @property
    def keys(self) -> tuple[str, ...]:
        return self._core.keys

    @property
    def step(self) -> int:
        """The last training step seen (``optimizer.iterations`` after the last batch)."""
        return self._step

    def _read_step(self) -> int:
        return int(self._iterations.numpy()) if self._iterations is not None else 0

    # -- fit ----------------------------------------------------------------------------------
    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        model: Any = self.model  # type: ignore[attr-defined]  # keras.callbacks.Callback's
        optimizer = getattr(model, "optimizer", None)
        # Keras's own mark of compile(): an optimizer set by hand leaves the model without
        # compile's state (stop_training among it), which fit and this callback need.
        if optimizer is None or not getattr(model, "compiled", False):
            raise ValueError(
                f"EventBusCallback needs a compiled model (model.compile(optimizer=...)); got {type(model).__name__} "
                f"{getattr(model, 'name', '')!r} {'not compiled' if optimizer is not None else 'without an optimizer'}"
            )
        tf = require_tensorflow("EventBusCallback")
        restore_train_function(model)  # an earlier fit that raised may have left it wrapped
        self._held.release()  # a hold an earlier fit left when it raised
        self._skipped = False
        self._iterations = optimizer.iterations
        checkpoint = self._checkpoint or self._default_checkpoint(tf, model, optimizer)
        self.checkpoint_backend.attach(checkpoint)
        self._core.offer_checkpoints(self.checkpoint_backend, TENSORFLOW)
        self._core.offer_profiler(TFProfiler())
        self._core.offer_machine(tensorflow_machine())
        per_execution = getattr(model, "steps_per_execution", 1)
        self._per_execution = per_execution if isinstance(per_execution, int) and per_execution > 0 else 1
        self._epoch = None
        self._core.offer_model(KerasModelView(model, lambda: self.params or {}, self._progress))  # type: ignore[attr-defined]
        self._rate = OptimizerRate(optimizer)
        self._rate.install()  # a schedule times hookbus's multiplier, before the train function is traced
        offered = self._core.offer_learning_rate(self._rate, publisher="EventBusCallback")
        self._in_fit = True
        self._fit_frame = _caller_of(model)
        self._core.when_run_closes(self._run_closed)
        self._checks.reset()
        strategy = getattr(model, "distribute_strategy", None)
        task = task_of_strategy(strategy)
        self._collective = None if task is None else CollectiveStop(strategy, task, self._check_every)
        if task is not None:
            self._core.set_task(task)
            if offered is not None:
                offered.local = False  # applied where the workers agree (CollectiveStop)
        self._core.begin()
        unbuilt = self.restore is not False and prepare_restore(model, optimizer)
        self.restored_from = restore_latest(self.bus, self.checkpoint_backend, self.restore)
        self._deferred = unbuilt and self.restored_from is not None  # checked after the first trained batch
        self._step = self._epoch_start = self._read_step()
        self._core.count_local_step(0)
        self._examples.start(model, self._declared_batch)
        self._core.session_created(self._step, True if self.restored_from else None, in_memory=True)
        if self._collective is not None:
            self._collective.reset(self._step)
            self._collective.agree(self._core, self._step, plan=True)
        self._stop_if_agreed()
        params = self.params  # type: ignore[attr-defined]  # keras.callbacks.Callback's
        start, self._resume_batch = start_epoch(model, params, self._step, self.restored_from is not None)
        if start > 0:
            model._initial_epoch = start
            self._set_initial_epoch = True  # cleared at train end: the next fit starts as told
        if self._resume_batch:
            pass_over(model, self._resume_batch, lambda: setattr(self, "_skipped", True))

    def _default_checkpoint(self, tf: Any, model: Any, optimizer: Any) -> Any:
        """``tf.train.Checkpoint(model=model, optimizer=optimizer)``: the same one while they are the same
        (its traced write is kept, :class:`~hookbus._tf._checkpoint_write.CompiledWrite`)."""
        made = self._made
        if made is None or made[0] is not model or made[1] is not optimizer:
            made = self._made = (model, optimizer, tf.train.Checkpoint(model=model, optimizer=optimizer))
        return made[2]

    def _values(self, keys: Iterable[str], logs: Mapping[str, Any]) -> dict[str, Any]:
        """A due step's values: Keras's logs, and the rate that trained the step from the optimizer."""
        rate = self._rate
        return {k: rate.used() if k == LEARNING_RATE_KEY and rate is not None else logs[k] for k in keys}

    def _stop_if_agreed(self) -> None:
        """Set ``model.stop_training`` once a stop is asked for (agreed, under a collective strategy)."""
        stopping = self._core.should_stop()
        collective = self._collective
        if collective is not None and not collective.agreed and collective.due(self._step):
            collective.agree(self._core, self._step)
        if stopping if collective is None else collective.agreed:
            self.model.stop_training = True  # type: ignore[attr-defined]

    def _count_examples(self, step: int) -> int | None:
        """The examples this ``fit`` trained through ``step`` (:class:`KerasExamples`)."""
        return self._examples.count(step)

    def _last_batch(self, batch: int) -> bool:
        """Whether ``batch`` (0-based, the last of its execution) is its epoch's last: it may be short."""
        steps = (self.params or {}).get("steps")  # type: ignore[attr-defined]
        return not isinstance(steps, int) or batch + 1 >= steps

    def _progress(self) -> EpochProgress | None:
        """The epoch ``fit`` is in, what dashboards show as Keras's progress bar does."""
        params = self.params or {}  # type: ignore[attr-defined]
        epochs, steps = params.get("epochs"), params.get("steps")
        if self._epoch is None or not isinstance(epochs, int) or epochs <= 0:
            return None
        per_epoch = steps if isinstance(steps, int) and steps > 0 else None  # None: an input of unknown length
        return EpochProgress(min(self._epoch + 1, epochs), epochs, per_epoch, self._epoch_start)

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._held.release()
        # The epoch a mid-epoch checkpoint resumes began that many batches before the restored step.
        self._epoch_start, self._resume_batch = self._step - self._resume_batch, 0
        self._batches = 0
        self._epoch = epoch
        self._examples.epoch_begins(self._step)

    def on_train_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._throughput.gap_open:  # the batch after a due one: the time outside the step ends here
            self._throughput.step_starts()
        self._held.release()  # Keras moved on: the last batch's save (if any) runs, before this one trains
        coming = self._epoch_start + batch + self._per_execution
        if coming >= self._profiling.first:  # in a profile window only (docs/guides/sinks/profiling.md "Profiling")
            self._profiling.step_begins(coming)

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._batches = batch + 1
        if self._skipped:  # a batch trained before the restart, passed over: not a step
            self._skipped = False
            return
        if self._deferred:  # a model built at this batch: its variables took the restored values (or fail here)
            self._deferred = False
            self.checkpoint_backend.check_deferred()
        if not self._checks.names_checked:  # Keras's log names arrive with the first batch: check them
            self._checks.check_names(logs)  # and the declared keys, also when no subscriber is due then
            if logs is not None:
                self._checks.check_keys(logs, "batch")
        step = self._epoch_start + batch + 1  # batch: the last batch of this execution, 0-based
        if self._profiling.marking:
            self._profiling.step_ended(step)
        plan = self._core.plan(step)
        bus = self.bus
        self._core.count_local_step(bus.local_step + step - self._step)
        if plan is None:
            self._step = step
            self._core.advance(step)
        else:
            logs = logs or {}
            if not self._checks.keys_checked:
                self._checks.check_keys(logs, "batch")
            real = self._read_step()  # exact even if iterations is not one per batch
            self._epoch_start += real - step
            self._step = real
            # What subscribers defer (a checkpoint's save) waits until Keras moves on: to the
            # next batch, or past the epoch's end, whose validation and epoch record belong to
            # this step; the save's barrier then covers them.
            self._held.hold()
            self._examples.last_batch = self._last_batch(batch)
            self._core.publish_step(plan, real, self._values(plan.keys, logs))
        self._logs = logs or self._logs
        self._stop_if_agreed()

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        logs = logs or {}
        real = self._read_step()  # Keras's call that finds an input of unknown length at its end
        if real != self._step:  # advances iterations without a batch: the epoch ends at what it holds
            self._step = real
            self._core.advance(real)
        self._examples.epoch_ends(self._step)
        try:
            steered = self._core.learning_rate
            if self._rate is not None and steered is not None and steered.steered and isinstance(logs, dict):
                # As Keras's ReduceLROnPlateau and LearningRateScheduler: the rate the epoch trained with,
                # in the logs History and the callbacks after this one read (and in the epoch event).
                logs[LEARNING_RATE_KEY] = self._rate.used()
            # An epoch a stop cut short is withheld for the resume to complete, unless a non-finite
            # value ended it (the NaN guard): no checkpoint holds such a step, no resume completes the
            # epoch, so it is over, and its record goes out as Keras's callbacks receive it (CSVLogger's row).
            if not cut_short(self.params, self.model, self._batches) or not finite_logs(logs):  # type: ignore[attr-defined]
                val = validation_values(logs)
                if val and self._eval.eval_wanted():
                    self._eval.publish_eval(self._step, {k: val[k] for k in self._eval.keys if k in val})
                if (epoch + 1) % self.every_n_epochs == 0:
                    self._core.publish_epoch(self._step, epoch_values(epoch, logs))
        finally:
            self._held.release()  # a save at the epoch's last step, after the events of that step
        if self._collective is not None and not self._collective.agreed:
            self._collective.agree(self._core, self._step)  # every worker ends the epoch here
        self._stop_if_agreed()

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        self._held.release()
        restore_train_function(self.model)  # type: ignore[attr-defined]
        final = self._core.final_plan(self._step)
        if final is not None:
            logs = self._logs
            keys = tuple(k for k in final.keys if k in logs or k == LEARNING_RATE_KEY)
            self._core.publish_final(final, self._values(keys, logs))
        self._core.end(self._step)
        self._leave_fit()
        if self._close_bus:
            self.bus.close()  # its run ends with the fit: files closed, outputs free for the next

    # -- a fit that raised --------------------------------------------------------------------
    # Keras calls no on_train_end when fit raises (a failing callback, a non-finite loss raised, a
    # Ctrl-C in a notebook). What on_train_begin installed must not outlive that fit: the learning
    # rate's override on the optimizer (a later fit without hookbus would train with a reduction's
    # multiplier), the offers, and the belief that fit runs (an evaluate after it would be taken for
    # fit's validation and published nowhere). The callback learns it when the run closes (`with
    # bus:` left with the error, bus.close()) or when Keras starts its next call with this callback.
    def set_params(self, params: Mapping[str, Any]) -> None:
        """Keras's: every ``fit``/``evaluate``/``predict`` that makes its own callback list sets them
        (fit's validation reuses fit's list and does not); while this callback believes it is in a
        ``fit`` whose frame is no longer running, that ``fit`` raised."""
        if self._in_fit and not self._fit_running():
            self._held.release()  # the failed step's deferred work, as the next fit's begin would
            restore_train_function(self.model)  # type: ignore[attr-defined]
            self._leave_fit()
        require_keras("EventBusCallback").callbacks.Callback.set_params(self, params)

    def _run_closed(self) -> None:
        """The bus's run closed; a ``fit`` still believed running raised (the run's sinks are closed)."""
        if self._in_fit:
            self._held.forget()  # the closed run's dispatcher starts afresh with the next run
            restore_train_function(self.model)  # type: ignore[attr-defined]
            self._leave_fit()

    def _fit_running(self) -> bool:
        """Whether the ``fit`` that began this callback's training is on the calling thread's stack."""
        running = self._fit_frame
        if running is None:
            return False
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if id(frame) == running[0] and frame.f_code is running[1]:
                return True
            frame = frame.f_back
        return False

    def _leave_fit(self) -> None:
        """Undo what ``on_train_begin`` installed for its ``fit``."""
        self.checkpoint_backend.detach()
        if self._rate is not None:
            self._rate.uninstall()
            self._rate = None
        self._core.offer_learning_rate(None)
        self._core.offer_profiler(None)
        self._core.offer_model(None)
        if self._set_initial_epoch:
            self.model._initial_epoch = None  # type: ignore[attr-defined]  # the next fit starts as told
            self._set_initial_epoch = False
        self._in_fit = False
        self._fit_frame = None

    # -- evaluate -----------------------------------------------------------------------------
    def on_test_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._in_fit:
            # fit's validation (published once, from on_epoch_end's val_* values) resets Keras's loss
            # tracker next: the epoch's examples are counted now, before it does.
            self._examples.epoch_ends(self._step)
            return
        # A test evaluation of the model as it is now: the step its training reached (0 untrained).
        optimizer = getattr(self.model, "optimizer", None)  # type: ignore[attr-defined]
        self._iterations = getattr(optimizer, "iterations", None)
        self._step = self._read_step()

    def on_test_end(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._in_fit:
            return
        logs = logs or {}
        self._checks.check_keys(logs, "evaluation")
        test = self._test
        if test.eval_wanted():
            # One test evaluation: begin (a run opens if none is, without `with bus:`; sinks are set
            # up if this run had no publisher yet), its values, end (what it wrote is flushed). No
            # session: it is no resume point, so no sink drops, replaces or restarts anything training
            # wrote. Where no subscriber records test evaluations, no run is opened for one.
            test.begin()
            test.publish_eval(self._step, {k: logs[k] for k in test.keys})
            test.end(self._step)
        if self._close_bus:
            self.bus.close()


def _caller_of(model: Any) -> tuple[int, CodeType] | None:
    """The innermost frame of a method of ``model`` on the calling thread's stack (its ``fit``, which
    calls the callbacks' ``on_train_begin``), as its id and code: not the frame itself, which would
    keep fit's locals (the data) alive after a fit that raised."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_locals.get("self") is model:
            return id(frame), frame.f_code
        frame = frame.f_back
    return None
