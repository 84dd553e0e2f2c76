"""EventLogSink: the run as a log of JSON lines, which ``hookbus replay`` feeds to any sink later.

Written with hookbus's sink authors' module only (``hookbus.sink_api``), as every built-in sink is.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from hookbus.sink_api import (
    DEFAULT_FLUSH_DEADLINE,
    CheckpointSaved,
    Event,
    ExceptionRaised,
    Schedule,
    ScheduleTimer,
    Sink,
    SinkContext,
    StopRequest,
    SubscriberError,
    WaitForStep,
    WriterKit,
    WriterStats,
    event_log_record,
    how_ended,
)

from ._event_log_file import LogFile

__all__ = ["EventLogSink"]

_HOST = socket.gethostname()  # what a system record names its host by

Item = tuple[Any, Mapping[str, Any]]  # (payload or record kind, more fields)
HParamValue = bool | int | float | str


class EventLogSink(Sink):
    """Records the run's events as one JSON object per line (see docs/guides/watching-and-replay.md "Record and
    replay" for the format); ``hookbus.replay`` and ``hookbus replay`` read it back.

    Passive (:attr:`hookbus.sink_api.Sink.passive`): it receives every step event published for the other
    subscribers, with the values fetched for them, and never makes a publisher fetch anything:
    recording costs no ``session.run`` work. Records: ``begin`` (keys, shapes, total steps when a
    sink knows them, ``hparams``, ``flush_secs``: how long ``hookbus watch`` may see nothing new from a
    healthy run), ``session_created``, ``waiting_for_step`` (a worker's start gate: state, the step
    waited for and the step read, seconds waited), ``step`` (train, eval, epoch and at-end
    events: step, wall time, mode, task, scalar values; arrays summarised, bytes skipped),
    ``checkpoint_saved``, ``stop_requested``, ``subscriber_error``, ``exception``, ``status``
    (the other sinks' status lines when they change, at evaluations, checkpoints, stops and
    ends), ``end`` (per session) and ``close`` (the run closed, with ``ended``: how it ended in
    one word, ``"finished"``, ``"stopped"`` or ``"crashed"``, from the first stop request and the
    exception it saw, by :func:`hookbus.sink_api.how_ended`).

    Its own schedule (``every_n_steps``, ``every_n_secs``) thins the train steps it records: of
    the train steps published for the others, it records those its schedule is due at (a step
    where ``step // every_n_steps`` grew since the last one recorded, or the first step seen and
    then the first one ``every_n_secs`` after the last recorded; both: whichever comes first).
    It stays passive: a multiple of ``every_n_steps`` on which no other subscriber is due is not
    published, so the first step published after it is recorded instead (with ``NanGuardSink``,
    due every step, every multiple is recorded). Everything else is recorded whatever the
    schedule: evaluations, epoch events, the at-end events, and every record that is not a step
    (sessions, checkpoints, stops, errors, statuses, ends, the close), so ``hookbus watch`` still
    sees how the run goes and ends, and a resume still cuts the log at its checkpoint. A session
    counts the schedule from its step, as the bus counts every subscriber's, so a run resumed
    from a checkpoint records the steps an uninterrupted one would have.

    Beside the log, ``<stem>.summary.json`` (:func:`hookbus.sink_api.run_summary_path`) holds the
    run's summary: hyper-parameters, task, newest step and wall time, the training rate, how it
    ended, and for each scalar key the latest value and the best with their steps
    (:class:`hookbus.RunSummary`). It is replaced atomically at each flush of the log (every
    ``flush_secs``, the checkpoint barrier, a session's end, the close), with the length and inode
    of the log it covers; :func:`hookbus.read_run_summary` reads it and the records after it, so a
    table of runs (``hookbus watch`` over many) never reads a whole log. A checkpoint's state
    keeps the summary too, and a resume cuts it back with the log.

    Exactly once across kills and resumes: its ``state_dict()`` is the log's length at the
    checkpoint barrier; a session restored from that checkpoint cuts the log back to it (keeping
    the ``checkpoint_saved`` record of the checkpoint restored) and appends. Without a saved
    state (no ``CheckpointSink``), a resumed or rewound session at step S keeps the records up to
    the first one after S; a fresh start (step 0, nothing restored) starts the log anew. Every
    cut replaces the file atomically with a new one (a new inode): a follower that sees the inode
    change re-reads from the start. Lines are written whole; a reader ignores a last line without
    its newline (:func:`hookbus.read_event_log`).

    Args:
        path: The log file (``str`` or path-like); its directory is created at begin.
        every_n_steps: Record a train step when ``step // every_n_steps`` grew since the last
            one recorded (default ``None``). Given with ``every_n_secs`` or alone, the schedule
            replaces the default as a whole; with neither (the default), every train step
            published for the other subscribers is recorded.
        every_n_secs: Record the first train step seen, then the first one this many seconds
            (the bus's clock) after the last one recorded (default ``None``).
        hparams: Hyperparameters (name to bool, int, float or str) recorded in ``begin``
            (default ``None``). ``hookbus replay --tensorboard`` writes them for TensorBoard.
        flush_secs: Longest time records stay unflushed (default 5.0).
        max_queue_size: Records that may wait before training blocks (default 1024).
        close_deadline: Seconds ``close`` waits for the writer (default 10.0).
        flush_deadline: Seconds a flush (the checkpoint barrier, a session's end) may wait for
            the disk (default 30.0); past it the sink is reported with its path and the records
            it could not write, and disabled, and training and the checkpoint go on.
        priority: Order among subscribers, lower first (see :class:`hookbus.sink_api.Sink`).
        on_error: ``"raise"``, ``"isolate"`` (default) or ``"disable"``.
        name: Shown in reports (default the class name).
        runs_on: Multi-worker training: ``"chief"`` (default), ``"all"`` or ``"each"`` (every
            worker writes ``<stem>.worker-<i><suffix>``).

    Raises:
        ValueError: at construction, naming the argument and the value, when one is invalid
            (``every_n_steps must be a positive int (got 0)``).
    """

    passive: ClassVar[bool] = True
    default_runs_on: ClassVar[str] = "chief"
    #: No schedule of its own: every train step published for the other subscribers is recorded.
    default_schedule: ClassVar[Schedule] = Schedule()

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        every_n_steps: int | None = None,
        every_n_secs: float | None = None,
        hparams: Mapping[str, HParamValue] | None = None,
        flush_secs: float = 5.0,
        max_queue_size: int = 1024,
        close_deadline: float = 10.0,
        flush_deadline: float = DEFAULT_FLUSH_DEADLINE,
        priority: int | None = None,
        on_error: str | None = None,
        name: str | None = None,
        runs_on: str | None = None,
    ) -> None:
        super().__init__(
            every_n_steps=every_n_steps,
            every_n_secs=every_n_secs,
            priority=priority,
            on_error=on_error,
            name=name,
            runs_on=runs_on,
        )
        self._base_path = self.path = WriterKit.file_path("path", path)
        if hparams is not None and not (
            isinstance(hparams, Mapping)
            and all(isinstance(k, str) and isinstance(v, HParamValue) for k, v in hparams.items())
        ):
            raise ValueError(f"hparams must map names to bool, int, float or str (got {hparams!r})")
        self.hparams = dict(hparams) if hparams is not None else None
        #: Options, the lock and the background writer: :class:`hookbus.sink_api.WriterKit`.
        self.output: WriterKit[Item] = WriterKit(
            self.name,
            flush_secs=flush_secs,
            max_queue_size=max_queue_size,
            close_deadline=close_deadline,
            flush_deadline=flush_deadline,
        )
        self._file: LogFile | None = None
        self._train_seen = False  # whether this run had a train session: the first one cuts
        self._started = False  # whether this run's records have a place in the file yet
        self._loaded: int | None = None  # the offset a checkpoint's state gave, for the next session
        self._loaded_summary: dict[str, Any] | None = None  # and the run's summary at that offset
        self._statuses: dict[str, str] = {}
        self._timer: ScheduleTimer | None = None  # the run's schedule of train steps; None: record all
        self._first_stop: StopRequest | None = None  # what the close record's "ended" is read from
        self._error: BaseException | None = None
        self._put_lock = threading.Lock()

    def setup(self, context: SinkContext) -> None:
        """A run begins: its schedule counts afresh, no stop or exception seen yet."""
        super().setup(context)
        self._timer = None if self.schedule.is_empty else self.schedule.timer()
        self._first_stop, self._error = None, None

    def set_output_suffix(self, suffix: str) -> None:
        """Write ``<stem>.<suffix><ext>`` instead: per-worker output."""
        base = self._base_path
        self.path = base.with_name(f"{base.stem}.{suffix}{base.suffix}")

    def on_begin(self, event: Event) -> None:
        if not self.output.writing:
            self._open()
        if event.mode == "test" and not self._started and self._file is not None:
            # A test evaluation creates no session: its records go on the log at once (appended).
            self.output.call(functools.partial(self._file.start_session, "append", event.step, None))
            self._started = True
        context = self.context
        totals = [p.total_steps for p in context.peers() if p.total_steps is not None]
        shapes = {k: (None if (s := context.static_shape(k)) is None else list(s)) for k in sorted(context.known_keys)}
        task = None if context.task is None else f"{context.task.type}:{context.task.index}"
        self._put(
            event,
            keys=sorted(context.known_keys),
            shapes=shapes,
            total_steps=min(totals, default=None),
            hparams=self.hparams,
            task=task,
            flush_secs=self.output.flush_secs,
        )

    def _open(self) -> None:
        self.output.prepare(self.path.parent)  # fail now, with the path, rather than on the writer's thread
        try:
            with self.path.open("rb") as f:
                first = f.readline()
        except FileNotFoundError:
            first = b""
        self.output.lock(self.path, "the event log")  # one writer per file: a second run fails before step 1
        if first.endswith(b"\n"):
            try:
                record = json.loads(first)
            except ValueError:
                record = None
            if not isinstance(record, dict) or "v" not in record or "record" not in record:
                raise ValueError(
                    f"{self.path} exists and is not an event log (its first line is {first[:60]!r}); "
                    "choose another path or remove it"
                )
        self._file = LogFile(self.path)
        self._train_seen, self._started, self._statuses = False, False, {}
        self.output.start(self._write, self._file.flush, self._file.close, target=repr(str(self.path)))

    def _put(self, payload: Any, **fields: Any) -> None:
        # The sampler's thread puts too (on_system): the writer's counters are not for two threads.
        with self._put_lock:
            if self.output.writing:
                self.output.put((payload, fields))

    def _write(self, item: Item) -> None:
        assert self._file is not None
        self._file.add(event_log_record(item[0], **item[1]))

    def on_session_created(self, event: Event) -> None:
        file = self._file
        if not self.output.writing or file is None:
            return
        if event.mode == "train":
            if self._timer is not None:  # the schedule counts from the session's step, as the bus's do
                self._timer.reset(event.step, self.context.clock())
            first, self._train_seen = not self._train_seen, True
            offset, self._loaded = self._loaded, None
            summary, self._loaded_summary = self._loaded_summary, None
            if offset is not None:
                how = "offset"  # restored from a checkpoint whose state says where the log was
            elif event.rewound or (first and (event.restored or event.step > 0)):
                how = "step"  # a model that continues at S (restored, or a second fit) keeps the log to S
            else:  # a fresh start drops an older run's records, not this run's (an evaluation first)
                how = "new" if first and not self._started else "append"
            self.output.call(functools.partial(file.start_session, how, event.step, offset, summary))
            self._started = True
        elif not self._started:  # an evaluation-only run (an evaluator task): add to the log
            self.output.call(functools.partial(file.start_session, "append", event.step, None))
            self._started = True
        self._put(event)

    def on_waiting_for_step(self, event: WaitForStep) -> None:
        self._put(event)

    def on_after_run(self, event: Event) -> None:
        if event.mode != "train":
            self._put(event)
            self._status(event.step, event.wall_time)
            return
        timer = self._timer
        if timer is not None and not event.final:  # the at-end events are rare: always recorded
            now = self.context.clock()
            if not timer.is_due(event.step, now):
                return
            timer.fire(event.step, now)
        self._put(event)

    def on_system(self, event: Event) -> None:
        """A sample of the machine (on the sampler's thread): a ``system`` record, whatever the
        schedule (samples come on their own clock), with the ``host`` it was taken on (a cluster
        view counts a host's figures once, however many workers share it); nothing once the log
        is closed."""
        self._put(event, host=_HOST)

    def on_checkpoint_saved(self, event: CheckpointSaved) -> None:
        now = time.time()
        self._put(event, wall_time=now)
        self._status(event.step, now)
        # To disk now (checkpoints are rare): a resume from this checkpoint keeps the record,
        # which follows the state the barrier took.
        self.output.flush()

    def on_stop_requested(self, event: StopRequest) -> None:
        if self._first_stop is None:  # the first request is the one the run stopped for
            self._first_stop = event
        self._put(event)
        self._status(event.step, event.wall_time)

    def on_subscriber_error(self, event: SubscriberError) -> None:
        self._put(event, wall_time=time.time())

    def on_exception(self, event: ExceptionRaised) -> None:
        self._error = event.error
        self._put(event, wall_time=time.time())

    def on_end(self, event: Event) -> None:
        self._put(event)
        self._status(event.step, event.wall_time)

    def _status(self, step: int, wall_time: float) -> None:
        statuses = {p.name: p.status for p in self.context.peers() if p.status}
        if statuses != self._statuses:
            self._statuses = statuses
            self._put("status", step=step, wall_time=wall_time, sinks=statuses)

    def state_dict(self) -> dict[str, Any]:
        """Where the log stood at the checkpoint barrier (after :meth:`flush`): its length in bytes."""
        file = self._file
        if file is None or file.handle is None or not self.output.writing:
            return {}
        flushed = file.flushed
        if flushed is not None and flushed[0] == file.size:  # the summary of the log up to there
            return {"offset": file.size, "summary": flushed[1]}
        return {"offset": file.size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next train session cuts the log back to ``state``'s offset (and its summary to the
        one saved with it)."""
        offset = state.get("offset")
        self._loaded = offset if isinstance(offset, int) and offset >= 0 else None
        summary = state.get("summary")
        self._loaded_summary = summary if self._loaded is not None and isinstance(summary, dict) else None

    def flush(self) -> None:
        """Block until every record received so far is handed to the OS (checkpoint barrier)."""
        self.output.flush()

    def writer_stats(self) -> WriterStats | None:
        """Records queued and written by this run's writer (see :meth:`hookbus.EventBus.stats`)."""
        return self.output.stats()

    def close(self) -> None:
        """Write a ``close`` record (``step``, ``wall_time`` and ``ended``: ``"finished"``,
        ``"stopped"`` or ``"crashed"``) and what is queued (within ``close_deadline``); idempotent."""
        try:
            if self.output.writing and not self.output.stalled:  # a stalled writer takes nothing more
                context = self._context
                step = context.current_step() if context is not None else None
                ended = how_ended(self._first_stop, self._error)
                self.output.put(("close", {"step": step, "wall_time": time.time(), "ended": ended}))
        finally:
            self.output.close()  # and the lock: the next run, in this process or another, may write the log
