"""TensorBoardSink: scalars, histograms, raw summaries, steps/sec and hparams as TensorBoard events."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event as EventProto
from tensorboard.compat.proto.event_pb2 import SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from hookbus.sink_api import (
    DEFAULT_FLUSH_DEADLINE,
    EPOCH_PREFIX,
    EVAL_PREFIX,
    LEARNING_RATE_KEY,
    SYSTEM_NOTICE_KEY,
    TEST_PREFIX,
    Event,
    ExceptionRaised,
    Schedule,
    Sink,
    SinkContext,
    StopRequest,
    WriterKit,
    WriterStats,
    how_ended,
)
from hookbus.validate import flag, non_negative_int, positive_int

from ._event_files import (
    close_all,
    flush_all,
    histogram,
    histogram_tensor,
    keras_model_event,
    new_event_file,
    scalar_tensor,
    text_tensor,
)
from ._hparams import SESSION_SUFFIX, earlier_sessions, session_end, session_start

__all__ = ["TensorBoardSink"]

HParamValue = bool | int | float | str
LAYOUTS = ("default", "keras")
_VAL = "val_"
_OLD_LAYOUT = re.compile(r"^events\.out\.tfevents\..*\.hookbus$")  # hookbus's own training files
EXAMPLES_TAG = "examples/sec"  # beside the rate: examples per second, where the publisher counts them
OUTSIDE_TAG = "outside_secs/step"  # and the training thread's seconds outside the steps, per step
_SESSION = "."  # the HParams session's run: the logdir's root
SYSTEM_RUN = "system"  # the machine's samples: a run of their own, on a time axis


class TensorBoardSink(Sink):
    """Writes the run as TensorBoard event files: training in ``logdir/train``, eval values in
    ``logdir/eval`` (or, with ``layout="keras"``, what Keras's ``TensorBoard`` callback writes).

    The default layout: float values become scalars, numpy arrays histograms, ``bytes`` values
    (serialized ``Summary`` protos, e.g. ``tf.summary.merge_all()``) are written as they are, and
    every train firing adds ``steps/sec`` (steps since the previous firing or session start, over
    the wall seconds between them), and over the same span ``examples/sec`` (where the publisher
    counts examples) and ``outside_secs/step`` (the training thread's time outside the steps). Eval
    values (``eval/<key>``) go to the ``eval`` run without the prefix, so TensorBoard overlays
    ``train`` and ``eval``. A test evaluation (``test/<key>``: ``model.evaluate`` outside ``fit``)
    goes to its own ``test`` run, without the prefix, at the training step it evaluated; that run
    never gets a session marker (an evaluation is no restart, and a test curve is no training curve
    to cut back), so every test evaluation stays. A logdir whose root already holds hookbus's own
    training event files (``*.hookbus``, written before the training run had its own directory) goes
    on at its root, so a resumed run stays one run; anybody else's event files there (a
    ``tf.summary`` writer of the user's, ``hp.KerasCallback``'s) change nothing.
    ``histogram_freq=N``: the histograms of the model's variables (what the training publisher
    offers: a Keras model's weights, the TF1 graph's trainable variables, a loop's ``weights=``) at
    the first write at or past every N-th step, tagged ``<variable>/histogram`` as Keras tags them.

    ``layout="keras"`` (under Keras ``fit``) writes the runs, tags, steps and values of Keras's
    ``TensorBoard(log_dir, histogram_freq, update_freq)``: ``train/`` and ``validation/`` with
    ``epoch_<name>`` at the 0-based epoch (``epoch_learning_rate`` in ``train/``), with
    ``update_freq`` a number of batches ``batch_<name>`` every that many steps, the weights'
    histograms every ``histogram_freq`` epochs (epochs 0, N, 2N, ...), each validation as
    ``evaluation_<name>_vs_iterations`` at the step, each test evaluation (``model.evaluate``
    outside ``fit``, before, between or after fits) likewise into ``validation/`` at the model's
    ``iterations`` (Keras's own ``on_test_end``), and the model's configuration (tag
    ``keras``), all as ``tf.summary`` writes them (tensors). It writes no session markers (Keras
    writes none): after a resume TensorBoard's default data server shows a re-run step once
    (the later write replaces it), its ``--load_fast=false`` reader twice, as after Keras's own
    ``BackupAndRestore``. Keras's ``batch_*`` steps count from each ``fit``'s start, these from the
    model's ``iterations`` (the same for a ``fit`` from step 0). With ``steps_per_execution=k > 1``
    Keras's callback counts calls, not steps (its ``batch_*`` step 3 is the model's step 3k, and its
    ``update_freq`` counts calls); these ``batch_*`` steps and ``update_freq`` stay the model's real
    steps, so the batch curves line up with ``evaluation_*_vs_iterations`` and with runs at another
    ``steps_per_execution``: the same tags and values as Keras's, at the real steps.

    ``hparams=`` makes the logdir one TensorBoard HParams session, as ``hp.KerasCallback(logdir,
    hparams)`` beside Keras's ``TensorBoard(logdir)`` writes it: the session start at the logdir's
    root (its own event file, ``*.hookbus-hparams``), so the HParams dashboard takes the training
    run and the evaluation runs below it (``train``, ``eval``; ``train``, ``validation``) as the
    session's metric columns, each with its last value; point TensorBoard at the directory above
    the logdirs (``tensorboard --logdir runs`` for ``runs/<trial>``), as HParams expects. The
    run's end writes the session's status from how it ended (:func:`hookbus.sink_api.how_ended`):
    finished → ``STATUS_SUCCESS``, crashed → ``STATUS_FAILURE``, stopped (a signal, Ctrl-C:
    preempted, resumable) → ``STATUS_UNKNOWN`` (TensorBoard has no "killed"; the end time says
    when), also when a step raises or a signal stops the run. TensorBoard shows only the first
    session start and end a directory holds, so the root keeps one session file: a training that
    goes on (restored from a checkpoint, or a second ``fit`` of the same model: its first step is
    past 0) replaces it keeping the session's start time, so a kill and a resume are one session
    ending as the resumed run ends; a training from step 0 in the same logdir is a new session that
    replaces the old one (its restart marker replaces the old curves alike). A run with only an
    evaluation publisher writes no session.

    ``system=True`` writes the machine's samples (``EventBus(system_metrics=...)``) to a run of their
    own, ``logdir/system``, under their own names (``system/cpu_utilization_percentage``, ...), beside
    ``system/training_step``, the training step the bus had reached. Their step is the sample's wall
    time in whole seconds since the Unix epoch, not the training step: samples come on their own
    clock, so a stall (no training step for minutes) is a stretch of samples with a flat
    ``system/training_step``, where samples keyed by training step would all stack on one step. Pick
    TensorBoard's *Relative* or *Wall* horizontal axis for them; the axis never goes back, across
    resumes and processes too, so that run needs no restart marker (samples less than a second
    apart share a step, and TensorBoard shows the last). Whole seconds, not milliseconds: the
    HParams plugin reads every run's last step as a 32-bit number. Where no GPU is sampled, the
    reason is written once as a text summary (tag ``system/notice``). Under ``runs_on="each"`` each
    worker's samples are in its own logdir's ``system`` run. Off by default: a new run in the
    logdir would show in every TensorBoard view of it, in the HParams session's columns and beside
    Keras's own runs under ``layout="keras"``; the dashboard and the event log show the machine
    by default.

    Each run (``with bus:``) starts a new event file whose name sorts after the existing ones.
    Every train session start at step S writes a ``SessionLog.START`` marker at S+1 into each
    sub-run, the first session included: the legacy reader purges steps >= S+1 on every marker,
    the ``--load_fast=false`` reader on every marker but a run's first, and the Rust data server
    drops a tag's steps when it is re-logged, so all three show each step once.

    TensorBoard's own ``EventFileWriter`` thread is the background writer: its bounded queue
    blocks when full. It flushes every ``flush_secs``, at :meth:`flush` and on close. The sink's
    :class:`hookbus.sink_api.WriterKit` (``self.output``) adopts it as a :class:`hookbus.sink_api.OwnThreadWriter`:
    its flush, which joins its queue with no timeout, runs within ``flush_deadline`` (on a
    stalled disk the sink is reported and disabled, and training and the checkpoint go on), and
    since its ``add_event`` blocks on a full queue with no timeout, the kit flushes before
    ``max_queue_size`` events are outstanding.

    Args:
        logdir: Directory for the event files (``str`` or path-like); created at begin.
        every_n_steps: Write every n steps. Default: every 100 steps when no schedule argument is
            given; schedule arguments replace the default as a whole (``every_n_secs=60`` alone
            writes by time only).
        keys: Keys to write (default ``None``: every key).
        flush_secs: Longest time events stay unflushed (default 5.0).
        hparams: Hyperparameters (name to bool, int, float or str) for the HParams dashboard:
            the logdir's session, started at the first training session and ended at the run's
            end with its status (default ``None``: no session).
        every_n_secs: Also (or instead) write every t seconds (default ``None``).
        max_queue_size: Events that may wait before training blocks (default 1024).
        histogram_bins: Buckets per histogram (default 30).
        close_deadline: Seconds ``close`` waits for the event files to close (default 10.0).
        flush_deadline: Seconds a flush (the checkpoint barrier, a session's end) may wait for
            the disk (default 30.0); past it the sink is reported with its logdir and the events
            it could not write, and disabled.
        layout: ``"default"`` or ``"keras"`` (Keras's ``TensorBoard`` callback's runs and tags;
            only under ``EventBusCallback``, with no ``keys`` or schedule arguments).
        histogram_freq: Write the model's variables as histograms: every N epochs with
            ``layout="keras"`` (Keras's meaning), every N steps in the default layout (default 0:
            never).
        update_freq: ``layout="keras"`` only, Keras's meaning: ``"epoch"`` (default: epoch values
            only), ``"batch"`` or a number of batches (also ``batch_<name>`` every that many steps).
        priority: Order among subscribers, lower first (see :class:`hookbus.sink_api.Sink`).
        on_error: ``"raise"``, ``"isolate"`` (default) or ``"disable"``.
        name: Shown in reports (default the class name).
        runs_on: Multi-worker training: ``"chief"`` (default), ``"all"`` or ``"each"`` (every
            worker writes its runs under ``logdir/worker-<i>``: ``worker-<i>/train`` and
            ``worker-<i>/eval``). Summaries are keyed by ``event.step``, the shared global step.
        train_run: The default layout's training run: a directory under ``logdir`` (default
            ``"train"``), or ``""`` for ``logdir`` itself, where ``SummarySaverHook(output_dir)``
            writes (:func:`hookbus.from_hooks`).
        rate_tag: The tag of the training rate, in steps per second (default ``"steps/sec"``;
            ``StepCounterHook`` writes ``"global_step/sec"``), or ``None``: no rate. With a
            schedule counted from its last firing (``Schedule(steps_from_last_firing=True)``, as
            :func:`hookbus.from_hooks` sets), the rate is measured between firings only, so a
            session's first firing writes none, as ``StepCounterHook``'s first does not.
        throughput: Beside the rate, over the same span, also write ``examples/sec`` (where the
            publisher counts examples: ``Event.examples``) and ``outside_secs/step`` (the training
            thread's seconds outside the steps per step, ``Event.outside_secs``) (default ``True``;
            :func:`hookbus.from_hooks` turns it off: ``StepCounterHook`` writes its rate alone).
            Nothing without ``rate_tag``.
        system: Also write the machine's samples to the run ``logdir/system`` (default ``False``;
            see above).
    """

    default_schedule: ClassVar[Schedule] = Schedule(every_n_steps=100)
    default_runs_on: ClassVar[str] = "chief"

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        every_n_steps: int | None = None,
        keys: str | Iterable[str] | None = None,
        flush_secs: float = 5.0,
        hparams: Mapping[str, HParamValue] | None = None,
        *,
        every_n_secs: float | None = None,
        max_queue_size: int = 1024,
        histogram_bins: int = 30,
        close_deadline: float = 10.0,
        flush_deadline: float = DEFAULT_FLUSH_DEADLINE,
        priority: int | None = None,
        on_error: str | None = None,
        name: str | None = None,
        runs_on: str | None = None,
        layout: str = "default",
        histogram_freq: int = 0,
        update_freq: str | int | None = None,
        train_run: str = "train",
        rate_tag: str | None = "steps/sec",
        system: bool = False,
        throughput: bool = True,
    ) -> None:
        flag("system", system)
        flag("throughput", throughput)
        if not isinstance(train_run, str) or os.path.isabs(train_run) or ".." in train_run.split(os.sep):
            raise ValueError(f"train_run must be a directory under logdir, or '' for logdir itself (got {train_run!r})")
        if rate_tag is not None and (not isinstance(rate_tag, str) or not rate_tag):
            raise ValueError(f"rate_tag must be a non-empty tag or None (got {rate_tag!r})")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))} (got {layout!r})")
        keras = layout == "keras"
        if keras and (keys is not None or every_n_steps is not None or every_n_secs is not None):
            raise ValueError(
                "layout='keras' writes every value Keras's TensorBoard writes, on Keras's schedule: "
                "pass update_freq= (not keys, every_n_steps or every_n_secs)"
            )
        if update_freq is not None and not keras:
            raise ValueError(
                f"update_freq={update_freq!r} is layout='keras''s (Keras's TensorBoard); "
                "the default layout writes every_n_steps"
            )
        update_freq = "epoch" if update_freq is None else update_freq
        if not (
            update_freq in ("epoch", "batch") or (isinstance(update_freq, int) and not isinstance(update_freq, bool))
        ):
            raise ValueError(
                f"update_freq must be 'epoch', 'batch' or a positive number of batches (got {update_freq!r})"
            )
        every_batches = 1 if update_freq == "batch" else update_freq if isinstance(update_freq, int) else None
        if every_batches is not None:
            every_n_steps = positive_int("update_freq", every_batches)
        super().__init__(
            keys=keys,
            every_n_steps=every_n_steps,
            every_n_secs=every_n_secs,
            priority=priority,
            on_error=on_error,
            name=name,
            runs_on=runs_on,
        )
        self.logdir = self._base_logdir = WriterKit.directory_path("logdir", logdir)
        #: Options, the locks and TensorBoard's writers under the deadlines: :class:`hookbus.sink_api.WriterKit`.
        self.output: WriterKit[None] = WriterKit(
            self.name,
            flush_secs=flush_secs,
            max_queue_size=max_queue_size,
            close_deadline=close_deadline,
            flush_deadline=flush_deadline,
        )
        self.histogram_bins = positive_int("histogram_bins", histogram_bins)
        self.layout = layout
        self.system = system
        self.histogram_freq = non_negative_int("histogram_freq", histogram_freq)
        self.update_freq = update_freq
        if keras and every_batches is None:
            self.schedule = Schedule()  # epoch values only: never due on a step
        self._histogram_block = -1  # the default layout: step // histogram_freq of the last histograms
        self._train_dir = self.logdir
        if hparams is not None and not (
            isinstance(hparams, Mapping)
            and all(isinstance(k, str) and isinstance(v, HParamValue) for k, v in hparams.items())
        ):
            raise ValueError(f"hparams must map names to bool, int, float or str (got {hparams!r})")
        self.hparams = dict(hparams) if hparams is not None else None
        self._writers: dict[str, EventFileWriter] = {}
        self._write_lock = threading.RLock()
        self._session_step = 0
        self._rate_from: tuple[int, float, int | None, float | None] | None = None
        self._graph_written = False
        self._first_stop: StopRequest | None = None
        self._error: BaseException | None = None
        self.train_run = train_run
        self.rate_tag = rate_tag
        self.throughput = throughput

    @property
    def receives_epochs(self) -> bool:
        return self.layout == "keras"  # Keras's epoch_* values come from the epoch events

    def setup(self, context: SinkContext) -> None:
        """A run begins: no stop or exception seen yet (the HParams session's end is read from them)."""
        super().setup(context)
        self._first_stop, self._error = None, None

    def set_output_suffix(self, suffix: str) -> None:
        """Write under ``<logdir>/<suffix>`` instead: per-worker output, one TensorBoard run each."""
        self.logdir = os.path.join(self._base_logdir, suffix)

    def on_begin(self, event: Event) -> None:
        keras_fit = event.mode == "test" or (event.mode == "train" and self.context.model().ends_epochs())
        if self.layout == "keras" and not keras_fit:  # a test evaluation is the Keras callback's evaluate
            raise ValueError(
                f"{self.name}: layout='keras' writes what Keras's TensorBoard callback writes and needs "
                "EventBusCallback under Keras fit; under this publisher use the default layout"
            )
        if not self.output.writing:  # else a second publisher (eval) began in the same run
            self.output.prepare(self.logdir, "event files")  # fail now with the path, not inside TensorBoard's writer
            old = self.layout == "default" and any(_OLD_LAYOUT.match(n) for n in os.listdir(self.logdir))
            run = self.train_run if self.layout == "default" else "train"
            self._train_dir = self.logdir if old or not run else os.path.join(self.logdir, run)
            writers: dict[str, EventFileWriter] = {}
            self._writers = writers  # this run's; closed on the kit's thread, unwaited for after a stall
            self.output.adopt(
                functools.partial(flush_all, writers),
                functools.partial(close_all, writers),
                target=f"the event files in {self.logdir!r}",
            )
            self._graph_written = False
        # One writer per run directory, locked before step 1: a train publisher writes the train
        # run (and the eval run when eval keys are known), an eval publisher only the eval run, so
        # an evaluator process beside training may share the logdir.
        keys = self.context.known_keys if self.keys is None else self.context.known_keys & self.keys
        evals = any(k.startswith(EVAL_PREFIX) for k in keys)
        # A test evaluation's run is locked with its first write (training never writes it).
        runs = {"eval": ["eval"], "test": []}.get(event.mode, ["train", "eval"] if evals else ["train"])
        for run in runs:
            self._lock(run)
        if event.mode != "train":
            return
        self._histogram_block = -1
        if "train" not in self._writers:
            self._writer("train")

    def _run_dir(self, run: str) -> str:
        """``"train"``'s directory, the HParams session's (the logdir), or the evaluation's
        (``eval``, ``test``; Keras's ``validation`` for both)."""
        if run == "train":
            return self._train_dir
        if run == _SESSION:
            return self.logdir
        if run == SYSTEM_RUN:
            return os.path.join(self.logdir, SYSTEM_RUN)
        return os.path.join(self.logdir, "validation" if self.layout == "keras" else run)

    def _lock(self, run: str) -> None:
        directory = self._run_dir(run)
        self.output.lock(directory, "the TensorBoard run", path=os.path.join(directory, ".events.lock"))

    def _writer(self, run: str) -> EventFileWriter:
        writer = self._writers.get(run)
        if writer is not None:
            return writer
        with self._write_lock:  # the sampler's thread makes the system run's writer
            return self._new_writer(run)

    def _new_writer(self, run: str) -> EventFileWriter:
        writer = self._writers.get(run)
        if writer is None:
            logdir = self._run_dir(run)
            os.makedirs(logdir, exist_ok=True)
            self._lock(run)  # a run first seen now (no publisher announced it at begin)
            # TensorBoard's writer flushes its first record as it is made: within the deadline too.
            made: list[EventFileWriter] = []
            self.output.run(
                lambda: made.append(
                    new_event_file(
                        logdir,
                        self.output.flush_secs,
                        self.output.max_queue_size,
                        SESSION_SUFFIX if run == _SESSION else ".hookbus",
                    )
                ),
                f"a new event file in {logdir!r} is not created",
            )
            writer = self._writers[run] = made[0]
            if run == "eval" and self.layout == "default":  # made lazily: the session's marker comes first
                self._add(writer, self._marker(time.time()))
        return writer

    def _marker(self, wall_time: float) -> EventProto:
        return EventProto(
            wall_time=wall_time, step=self._session_step + 1, session_log=SessionLog(status=SessionLog.START)
        )

    def on_session_created(self, event: Event) -> None:
        if event.mode != "train" or not self.output.writing:
            return  # an eval session evaluates a checkpoint; it is no restart
        self._session_step = event.step
        # Counted from the last firing (TensorFlow's timers): the first firing only starts the clock.
        self._rate_from = None if self.schedule.steps_from_last_firing else (event.step, event.wall_time, 0, None)
        # A copy: the sampler's thread may add the system run meanwhile. The system run is on a time
        # axis that never goes back: no marker (one at S+1 would purge every sample after it).
        for run, writer in tuple(self._writers.items()) if self.layout == "default" else ():  # Keras writes none
            if run not in (_SESSION, "test", SYSTEM_RUN):  # test evaluations are no training curve: never cut back
                self._add(writer, self._marker(event.wall_time))
        if (hparams := self.hparams) is not None and _SESSION not in self._writers:  # the run's first training
            self._start_session(event, hparams)
        if not self._graph_written:  # once per event file: TensorBoard's graph tab
            self._graph_written = True
            graph_def = self.context.model().graph_def()
            if graph_def:
                self._add(self._writer("train"), EventProto(wall_time=event.wall_time, graph_def=graph_def))
            config = self.context.model().config()
            if config:
                self._add(self._writer("train"), keras_model_event(event.wall_time, config))

    def _start_session(self, event: Event, hparams: dict[str, HParamValue]) -> None:
        """The logdir's HParams session (see ``sinks/_hparams.py``): a new session file, then the
        earlier ones removed; a training that goes on keeps the session's start time."""
        earlier = earlier_sessions(self.logdir)
        goes_on = event.restored or event.step > 0
        self._add(self._writer(_SESSION), session_start(hparams, event.wall_time, earlier, goes_on))
        with self._write_lock:  # the sampler's thread may be adding a sample
            self.output.flush()  # on disk before the earlier session goes: the logdir always shows one
        for path in earlier:
            with contextlib.suppress(FileNotFoundError):  # gone already: nothing to replace
                os.remove(path)

    def on_stop_requested(self, event: StopRequest) -> None:
        if self._first_stop is None:  # the first request is the one the run stopped for
            self._first_stop = event

    def on_exception(self, event: ExceptionRaised) -> None:
        self._error = event.error

    def on_after_run(self, event: Event) -> None:
        if not self.output.writing:
            return
        if self.layout == "keras":
            self._keras(event)
            return
        eval_mode = event.mode in ("eval", "test")
        prefix = TEST_PREFIX if event.mode == "test" else EVAL_PREFIX
        values: list[Summary.Value] = []
        raw: list[Summary] = []
        for key, value in event.values.items():
            if self.keys is not None and key not in self.keys:
                continue
            tag = key[len(prefix) :] if eval_mode and key.startswith(prefix) else key
            if isinstance(value, float):
                values.append(Summary.Value(tag=tag, simple_value=value))
            elif isinstance(value, np.ndarray) and (histo := histogram(value, self.histogram_bins)) is not None:
                values.append(Summary.Value(tag=tag, histo=histo))
            elif isinstance(value, bytes):
                raw.append(Summary.FromString(value))  # a malformed proto raises (isolated by the bus)
        if not eval_mode and self.rate_tag is not None:
            last, self._rate_from = self._rate_from, (event.step, event.wall_time, event.examples, event.outside_secs)
            if last is not None and event.step > last[0] and event.wall_time > last[1]:
                rate = (event.step - last[0]) / (event.wall_time - last[1])
                values.append(Summary.Value(tag=self.rate_tag, simple_value=rate))
                if self.throughput:
                    values.extend(_throughput(last, event))
        if not eval_mode and self.histogram_freq and event.step // self.histogram_freq > self._histogram_block:
            self._histogram_block = event.step // self.histogram_freq
            for name, array in self._variables():
                if (histo := histogram(array, self.histogram_bins)) is not None:
                    values.append(Summary.Value(tag=f"{name}/histogram", histo=histo))
        run = event.mode if eval_mode else "train"
        self._write(run, event, [Summary(value=values)] if values else [], raw)

    def _keras(self, event: Event) -> None:
        """What Keras's ``TensorBoard`` callback writes for ``event``."""
        values = event.values
        if event.mode == "epoch":
            epoch = int(values["epoch"])
            logs = {k[len(EPOCH_PREFIX) :]: v for k, v in values.items() if k.startswith(EPOCH_PREFIX)}
            train = {k: v for k, v in logs.items() if not k.startswith(_VAL) and k != LEARNING_RATE_KEY}
            rate = self.context.learning_rate()  # Keras reads the optimizer's rate at the epoch's end
            if rate is not None:
                train[LEARNING_RATE_KEY] = float(rate.backend.read())
            elif LEARNING_RATE_KEY in logs:
                train[LEARNING_RATE_KEY] = logs[LEARNING_RATE_KEY]
            scalars = [scalar_tensor(f"epoch_{k}", float(v)) for k, v in train.items() if isinstance(v, float)]
            if self.histogram_freq and epoch % self.histogram_freq == 0:
                bins = self.histogram_bins
                scalars += [histogram_tensor(f"{name}/histogram", a, bins) for name, a in self._variables()]
            self._write("train", event, [Summary(value=scalars)] if scalars else [], step=epoch)
            val = [scalar_tensor(f"epoch_{k[len(_VAL) :]}", float(v)) for k, v in logs.items() if k.startswith(_VAL)]
            if val:
                self._write("eval", event, [Summary(value=val)], step=epoch)
        elif event.mode in ("eval", "test"):  # Keras's on_test_end: fit's validation, or an evaluate
            prefix = EVAL_PREFIX if event.mode == "eval" else TEST_PREFIX
            tags = [(f"evaluation_{k[len(prefix) :]}_vs_iterations", v) for k, v in values.items()]
            val = [scalar_tensor(tag, v) for tag, v in tags if isinstance(v, float)]
            if val:
                self._write("eval", event, [Summary(value=val)])
        else:  # a batch at update_freq: Keras's batch logs (no learning rate)
            batch = [scalar_tensor(f"batch_{k}", v) for k, v in values.items() if isinstance(v, float)]
            batch = [v for v in batch if v.tag != f"batch_{LEARNING_RATE_KEY}"]
            if batch:
                self._write("train", event, [Summary(value=batch)])

    def _variables(self) -> list[tuple[str, np.ndarray[Any, Any]]]:
        """The training publisher's variables by name; none where it offers none."""
        offered = self.context.model().variables()
        return [] if offered is None else [(name, np.asarray(value)) for name, value in offered.items()]

    def _write(
        self, run: str, event: Event, summaries: list[Summary], raw: Sequence[Summary] = (), *, step: int | None = None
    ) -> None:
        writer = self._writer(run)
        at = event.step if step is None else step
        for summary in [*summaries, *raw]:
            self._add(writer, EventProto(wall_time=event.wall_time, step=at, summary=summary), row=True)

    def _add(self, writer: EventFileWriter, proto: EventProto, *, row: bool = False) -> None:
        """Hand ``proto`` to ``writer`` through the kit, which flushes first (within the deadline)
        while ``max_queue_size`` events are outstanding: ``add_event`` never blocks on a full queue."""
        # One writer call at a time: the sampler's thread adds the system run's events, and the
        # kit's counters (and the flush it may run first) are not for two threads.
        with self._write_lock:
            self.output.add(lambda: writer.add_event(proto), row=row)

    def on_system(self, event: Event) -> None:
        """A sample of the machine (on the sampler's thread), with ``system=True``: scalars in the
        ``system`` run, at its wall time in seconds (see the class docstring); nothing before begin
        or after close."""
        if not self.system or not self.output.writing or self.output.stalled:
            return
        writer = self._writer(SYSTEM_RUN)
        values = [scalar_tensor(key, value) for key, value in event.values.items() if isinstance(value, float)]
        values.append(scalar_tensor("system/training_step", float(event.step)))
        notice = event.values.get(SYSTEM_NOTICE_KEY)
        if isinstance(notice, str):
            values.append(text_tensor(SYSTEM_NOTICE_KEY, notice))
        step = int(event.wall_time)
        self._add(writer, EventProto(wall_time=event.wall_time, step=step, summary=Summary(value=values)), row=True)

    def writer_stats(self) -> WriterStats | None:
        """Summary events handed to TensorBoard's ``EventFileWriter`` in this run; its queue
        keeps its depth to itself, so ``written`` and ``queued`` are ``None``."""
        return self.output.stats()

    def flush(self) -> None:
        """Block until every event received so far is written to the OS (checkpoint barrier).

        Within ``flush_deadline``, else raises :class:`hookbus.sink_api.WriterStalled` (the bus disables
        the sink and reports it) and leaves the writers' stuck threads behind (daemons).
        """
        if self._writers:
            with self._write_lock:
                self.output.flush()

    def close(self) -> None:
        """Flush and close the event files (idempotent); a later run starts new files.

        Returns within ``close_deadline``: TensorBoard's writer joins its thread without a
        timeout, so a stalled disk would otherwise hang the end of the run (and the signals
        waiting behind it). Past the deadline it warns (``WriterWarning``) and leaves the files
        to a background thread. After a flush missed ``flush_deadline`` (already reported) it
        leaves them to that thread at once.
        """
        try:
            session = self._writers.get(_SESSION)
            if session is not None and self.output.writing and not self.output.stalled:
                self._add(session, session_end(how_ended(self._first_stop, self._error), time.time()))
        finally:
            try:
                self.output.close()
            finally:
                self._writers = {}  # the closed run's stay with the kit's closing thread


def _throughput(last: tuple[int, float, int | None, float | None], event: Event) -> list[Summary.Value]:
    """``examples/sec`` and ``outside_secs/step`` over the span from ``last`` (step, wall time, examples,
    seconds outside; at the session's start no example yet, and no time outside measured) to ``event``,
    where both ends have them."""
    step, wall_time, examples, outside = last
    found = []
    if event.examples is not None and examples is not None and event.examples >= examples:
        rate = (event.examples - examples) / (event.wall_time - wall_time)
        found.append(Summary.Value(tag=EXAMPLES_TAG, simple_value=rate))
    if event.outside_secs is not None and outside is not None:
        per_step = max(0.0, event.outside_secs - outside) / (event.step - step)
        found.append(Summary.Value(tag=OUTSIDE_TAG, simple_value=per_step))
    return found
