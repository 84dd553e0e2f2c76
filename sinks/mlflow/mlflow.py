"""MLflowSink: the run in an MLflow tracking store, each step's point once across kills and resumes.

Written with hookbus's sink authors' module only (``hookbus.sink_api``), as every built-in sink is.
MLflow is an optional extra (``pip install 'hookbus[mlflow]'``): it is imported when the sink is
made, never by ``import hookbus.sinks``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from hookbus.sink_api import (
    DEFAULT_FLUSH_DEADLINE,
    EPOCH_PREFIX,
    TRACKER_STATUS,
    Event,
    ExceptionRaised,
    ModelExported,
    OutputLock,
    Schedule,
    Sink,
    SinkContext,
    StopRequest,
    WriterError,
    WriterKit,
    WriterStats,
    how_ended,
)
from hookbus.validate import flag

from ._names import check_names, mlflow_name, names_tags
from ._run import MODES, Point, RunPlan, TrackedRun
from ._settings import HTTP_BOUNDS, QUIET_URL, hold_settings, release_settings
from ._shipper import Shipper
from ._spool import Spool, SpoolWriter
from ._uri import Redactor, check_tracking_uri

__all__ = ["MLflowSink"]

logger = logging.getLogger("hookbus")

HParamValue = bool | int | float | str
RATE_NAME = "steps/sec"
EXAMPLES_NAME = "examples/sec"  # beside the rate, where the publisher counts examples (Event.examples)
OUTSIDE_NAME = "outside_secs/step"  # the training thread's seconds outside the steps, per step
_OWN_NAMES = (RATE_NAME, EXAMPLES_NAME, OUTSIDE_NAME)  # what the sink logs itself
MODEL_SUMMARY = "model_summary.txt"  # the artifact MLflow's Keras callback writes
_RUN_KEY = re.compile(r"^[\w.\-:/]{1,250}$")


SYSTEM_PREFIX = "system/"  # MLflow's System metrics tab shows the metrics named so
_VALIDATION = EPOCH_PREFIX + "val_"  # Keras's validation values in its epoch logs
LAYOUTS = ("hookbus", "keras")
KERAS_VALIDATION = "validation_"  # MLflow's Keras callback's names for an evaluation's values

MAX_PARAM_LENGTH = 6000  # MLflow's limit on a param's value


class MLflowSink(Sink):
    """Logs the run to MLflow: params, metrics by step, the stop reason and how the run ended.

    What goes where: ``hparams`` as params; train values as metrics at their step; evaluations under
    their ``eval/`` names at the training step evaluated; Keras epoch values under ``epoch/`` names
    at the step the epoch ended, but for the validation's (``val_*``), logged once, as the
    evaluation's ``eval/`` names at that step (unless ``keys`` names them); a test evaluation
    (``model.evaluate`` outside ``fit``) under its ``test/`` names at the training step it
    evaluated, once per step (the first; an ``evaluate`` after ``with bus:`` is a run of its own, a
    new MLflow run unless ``continue_ended=True`` adds it to the training's); ``steps/sec`` between
    due train steps, and over the same span ``examples/sec`` (where the publisher counts examples)
    and ``outside_secs/step`` (the training thread's seconds outside the steps per step); the
    machine's samples (the bus's ``system`` signal) under their ``system/`` names, MLflow's own
    system-metric names, so its System metrics tab shows them, sample n at step n as MLflow's
    monitor numbers them (going on after a resume), logged whatever ``keys`` says; each point
    timestamped with its event's own wall time. Keys become MLflow names by :func:`mlflow_name` (one
    rule; a collision fails at begin naming both keys; the run's tag ``hookbus.names`` records every
    changed name). Scalars only (arrays and bytes are not logged).

    Never waits for the network: each point goes first to a local spool in ``directory`` (JSON
    lines, written by the background writer and flushed to the OS at the checkpoint barrier like
    any local file), and a shipper thread of the sink's own ships the spool in ``log_batch`` calls
    (at most 900 metrics and 100 tags a call), each batch tagged in the same call with the last
    step of each mode it holds (``hookbus.shipped.train`` / ``.eval`` / ``.epoch``). A server that
    is down or slow costs training nothing and loses nothing: the shipper retries (pauses of 0.5
    s doubling to 15 s), the sink stays enabled, ``bus.stats()`` and the dashboard's health line
    say ``MLflowSink: http://host:5000 unreachable (ConnectionError: ...): 37 points wait in the
    spool``, and what the spool holds ships when the server answers: later in the run, at the
    close (within ``close_deadline``; a server still away gets one more try, not the whole
    deadline), or at the next start in the same ``directory`` (to their own run), the run's end
    included. The spool is bounded on disk: its segments (1 MiB)
    are deleted once shipped, all of them once the run's end has shipped.

    Exactly once: the run (its MLflow id and the training's own id, tag ``hookbus.training``) and
    the steps shipped are the sink's state through the checkpoint barrier; every point at or
    before the last step of its mode that the spool or the run holds is dropped, so a resume that
    re-runs steps never duplicates one. Trade-off: the steps re-run after a restore keep their
    first values (the same values when training is deterministic; CSV files keep the re-run's).
    One point per mode and step: evaluating a step twice ships the first.

    The run: continued only by a training that restores it, from a checkpoint whose state names
    it (the sink's state goes through the checkpoint barrier); a fresh start is a new run,
    whatever it shares with earlier trainings (the directory, the experiment, ``run_name``): a
    training killed before its first checkpoint and started again restores nothing, so it is a
    new run too. The run's id is kept in ``directory``'s id file the moment the run is created
    (before any checkpoint), so what a killed training left in the spool ships to its own run at
    the next start in that directory, and that run ends KILLED (tag ``hookbus.end``: ``presumed
    dead``). Two trainings on one directory and run key at once fail before step 1 naming the
    holder. A continued run is RUNNING again; a param
    whose value changed keeps its first value (MLflow refuses a change) and the change is tagged
    ``hookbus.param_changed.<name>``. At close the run's status says how it ended, in the one
    word of :func:`hookbus.sink_api.how_ended` (tag ``hookbus.end``): finished → FINISHED,
    stopped (a signal, Ctrl-C, a stop from another thread) → KILLED, crashed → FAILED, with tags
    ``hookbus.stop_reason``, ``hookbus.error`` and ``hookbus.final_step``.

    Credentials: a URI's user information (``http://alice:TOKEN@host``) is used by the client
    and never shown: messages, stats, the status line and tags show ``http://***@host``. Prefer
    MLflow's own variables, ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` or
    ``MLFLOW_TRACKING_TOKEN``, over credentials in the URI. MLflow's HTTP client would retry a
    request for minutes (7 retries with backoff, 120 s timeouts), and the shipper retries anyway:
    from the first sink's begin to the last one's close it sets ``MLFLOW_HTTP_REQUEST_MAX_RETRIES=0``,
    ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR=0`` and ``MLFLOW_HTTP_REQUEST_TIMEOUT=15`` in the
    environment where they are not set already (a user's own values are kept; they apply to every
    MLflow client of the process meanwhile), and removes them at close. With credentials in the
    URI it also sets ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT=true`` likewise: MLflow prints an
    ended run's link with the URI as given.

    Args:
        tracking_uri: Where the runs go: an MLflow tracking URI whose scheme MLflow's client
            accepts (``http``, ``https``, ``sqlite``, ``postgresql``, ``mysql``, ``mssql``,
            ``databricks``, a plugin's). Default ``None``: ``sqlite:///<directory>/mlflow.db``, with
            artifacts in ``<directory>/artifacts`` (``mlflow ui --backend-store-uri
            sqlite:///<directory>/mlflow.db`` shows it).
        experiment: The experiment's name, created when missing (default ``"hookbus"``).
        run_name: The run's name (default ``None``: MLflow picks one).
        hparams: Hyperparameters (name to bool, int, float or str), logged as params.
        log_training_params: Also log the training's own parameters as params where its publisher
            offers them (default ``True``): under Keras ``fit``, ``epochs``, ``steps_per_epoch`` and the
            optimizer's configuration as ``optimizer_<name>``, and the model's summary as the artifact
            ``model_summary.txt``, as MLflow's Keras callback logs them.
        log_model: Also ship the model :class:`~hookbus.sinks.ExportSink` exports (on the same
            bus), as the run's artifact ``model`` (default ``False``): each export, when it moves
            into place, replaces the last under that one name (``model/model.keras`` under ``fit``,
            the SavedModel's files for graphs and loops; the files as exported, not an MLflow
            Model flavor), so the run holds the best (or the final) model. Staged beside the
            spool (hard links where the filesystem allows) and shipped in the background like the
            points: a server that is down gets it when it answers, in this run or at the next
            start in the same directory. After a resume from an earlier checkpoint, ``model`` may be
            an export of a lost step until the re-run exports again.
        tags: Run tags (valid MLflow names to strings).
        every_n_steps: Log train values every n steps (default 10 when no schedule argument is
            given; schedule arguments replace the default as a whole).
        keys: Keys to log (default ``None``: every scalar key).
        directory: The sink's own files: its spool, its run's id, and the default SQLite store
            (default ``"mlruns"``). Trainings may share it (one at a time per run key): a run is
            continued only by a training that restores it from a checkpoint.
        run_key: The run's identity within ``directory`` (default: a digest of ``experiment``,
            ``run_name`` and the worker under ``runs_on="each"``): its files are named by it, so
            workers sharing a directory keep theirs apart. Characters ``[\\w.\\-:/]``, at most 250.
        continue_ended: Also continue the newest run of the same ``run_key`` in the store when
            this directory names none, ended or not, adding only the steps it lacks (default
            ``False``). For uploads of one recorded run: ``hookbus replay --mlflow`` run twice
            adds nothing the first upload shipped.
        every_n_secs: Also (or instead) log every t seconds (default ``None``).
        flush_secs: Longest time points wait before they ship (default 5.0).
        max_queue_size: Events that may wait before training blocks (default 1024).
        close_deadline: Seconds ``close`` waits for the spool's writer and then the shipper
            (default 10.0; a local SQLite store, whose first use runs MLflow's migrations, gets
            ``flush_deadline`` if that is longer); what has not shipped by then waits in the spool
            for the next start.
        flush_deadline: Seconds a flush of the spool may take (default 30.0).
        priority: Order among subscribers, lower first (see :class:`hookbus.sink_api.Sink`).
        on_error: ``"raise"``, ``"isolate"`` (default) or ``"disable"``.
        name: Shown in reports (default the class name).
        runs_on: ``"chief"`` (default: one run, from the chief) or ``"each"`` (one run per worker,
            tagged ``hookbus.task``); ``"all"`` is refused (every worker in one run).
        run_id: Log into this existing run instead of one the sink creates (default ``None``): its
            id, or a function returning it, called when training begins on the training thread
            (``lambda: mlflow.active_run().info.run_id``: the run MLflow's fluent API has active
            then). The run is the user's, as with MLflow's own callbacks: never created (a missing
            or deleted one is reported as a refused request, its points kept in the spool), never
            ended (its status, end time, name and tags stay as they are), and it gets no
            ``hookbus.*`` tag; ``hparams``, ``tags`` and the training's params are logged into it
            (a param it holds with another value keeps that value, as MLflow refuses a change).
            Exactly once without the ``hookbus.shipped`` tags: the steps a training ships are kept
            in ``directory``'s id file and the sink's state as always, and a value whose name,
            step and timestamp the run already holds (shipped before a kill, the id file not yet
            written) is not sent again. Each training into the run (a second ``fit``) logs its own
            points, its steps starting again as MLflow's callbacks log them. ``experiment`` is not
            used; ``run_name``, ``continue_ended=True`` and ``runs_on="each"`` are refused with it.
        layout: The metrics' names and steps: ``"hookbus"`` (default: as above, ``loss`` and
            ``steps/sec`` at the training step, ``eval/<name>``, ``epoch/<name>``) or ``"keras"``,
            what MLflow's Keras callback (``mlflow.keras.MlflowCallback``) logs: without a step
            schedule (its default, ``log_every_epoch=True``) Keras's epoch logs under their own
            names (``loss``, ``val_loss``, ...) at the epoch's 0-based index; with
            ``every_n_steps=n`` (``log_every_n_steps=n``) the train values under their own names
            at their step (``optimizer.iterations``) and no epoch values (their names would be the
            same at other steps); in both, each validation of ``fit`` as ``validation_<name>`` at
            step 0, every one of Keras's ``val_`` values, as the callback's ``on_test_end`` logs
            it (from the epoch's logs: with ``EventBusCallback(every_n_epochs=k)`` every k-th),
            and a test evaluation's values likewise; no ``steps/sec``; of the training's params
            the optimizer's configuration alone (``optimizer_<name>``), and ``model_summary.txt``;
            no system metrics (the callback logs none).
        system: Also log the machine's samples (the bus's ``system`` signal) as MLflow's own system
            metrics, which its run page's System metrics tab shows (default ``False``: a run's
            metrics are the training's alone, as before; not with ``layout="keras"``).

    Raises:
        ImportError: MLflow is not installed (``pip install 'hookbus[mlflow]'``).
        ValueError: An argument is invalid, naming it and what was expected.
    """

    default_schedule: ClassVar[Schedule] = Schedule(every_n_steps=10)
    default_runs_on: ClassVar[str] = "chief"

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment: str = "hookbus",
        run_name: str | None = None,
        hparams: Mapping[str, HParamValue] | None = None,
        tags: Mapping[str, str] | None = None,
        every_n_steps: int | None = None,
        keys: str | Iterable[str] | None = None,
        *,
        directory: str | os.PathLike[str] = "mlruns",
        run_key: str | None = None,
        continue_ended: bool = False,
        log_training_params: bool = True,
        log_model: bool = False,
        every_n_secs: float | None = None,
        flush_secs: float = 5.0,
        max_queue_size: int = 1024,
        close_deadline: float = 10.0,
        flush_deadline: float = DEFAULT_FLUSH_DEADLINE,
        priority: int | None = None,
        on_error: str | None = None,
        name: str | None = None,
        runs_on: str | None = None,
        run_id: str | Callable[[], str] | None = None,
        layout: Literal["hookbus", "keras"] = "hookbus",
        system: bool = False,
    ) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be 'hookbus' or 'keras' (got {layout!r})")
        if run_id is not None and not (callable(run_id) or (isinstance(run_id, str) and run_id.strip())):
            raise ValueError(f"run_id must be an MLflow run id, a function returning one, or None (got {run_id!r})")
        if run_id is not None:
            for argument, value, default in (
                ("run_name", run_name, None), ("continue_ended", continue_ended, False), ("runs_on", runs_on, None),
            ):  # fmt: skip
                if value != default and not (argument == "runs_on" and value == "chief"):
                    raise ValueError(
                        f"{argument}={value!r} applies to a run the sink creates; with run_id= it logs into "
                        "the run given (leave it out)"
                    )
        if runs_on == "all":
            raise ValueError(
                "runs_on='all' would log every worker's points into one MLflow run; use 'chief' (default) "
                "or 'each' (one run per worker)"
            )
        super().__init__(
            keys=keys,
            every_n_steps=every_n_steps,
            every_n_secs=every_n_secs,
            priority=priority,
            on_error=on_error,
            name=name,
            runs_on=runs_on,
        )
        if tracking_uri is not None and (not isinstance(tracking_uri, str) or not tracking_uri):
            raise ValueError(f"tracking_uri must be a non-empty MLflow tracking URI or None (got {tracking_uri!r})")
        if tracking_uri is not None:
            check_tracking_uri(tracking_uri)
        self.tracking_uri = tracking_uri
        self.directory = Path(WriterKit.directory_path("directory", directory))
        self._redactor = Redactor(self.resolved_tracking_uri)
        self.experiment = _text("experiment", experiment)
        self.run_name = None if run_name is None else _text("run_name", run_name)
        if hparams is not None and not (
            isinstance(hparams, Mapping)
            and all(isinstance(k, str) and isinstance(v, HParamValue) for k, v in hparams.items())
        ):
            raise ValueError(f"hparams must map names to bool, int, float or str (got {hparams!r})")
        self.hparams = dict(hparams or {})
        self.log_training_params = bool(flag("log_training_params", log_training_params))
        self.log_model = bool(flag("log_model", log_model))
        self.system = bool(flag("system", system))
        self._params = {n: str(self.hparams[k]) for k, n in check_names(self.hparams, "hparams").items()}
        if tags is not None and not (isinstance(tags, Mapping) and all(isinstance(v, str) for v in tags.values())):
            raise ValueError(f"tags must map tag names to strings (got {tags!r})")
        for tag in tags or {}:
            if not isinstance(tag, str) or tag != mlflow_name(tag):  # the one name rule: a valid name maps to itself
                raise ValueError(f"tag name {tag!r} is not a valid MLflow name (try {mlflow_name(str(tag))!r})")
        self.tags = dict(tags or {})
        if run_key is not None and (not isinstance(run_key, str) or not _RUN_KEY.match(run_key)):
            raise ValueError(f"run_key must be 1 to 250 characters of [\\w.\\-:/] (got {run_key!r})")
        self.run_key = run_key
        self.continue_ended = bool(flag("continue_ended", continue_ended))
        self.run_id = run_id
        self.layout = layout
        if system is True and layout == "keras":
            raise ValueError(
                "system=True logs the machine's samples, which layout='keras' (MLflow's Keras callback) does not"
            )
        if layout == "keras" and every_n_steps is None and every_n_secs is None:
            self.schedule = Schedule()  # MLflow's Keras callback's default: the epochs' values alone
        #: Epoch values go out (``layout="keras"``: only without a step schedule, as their names are the steps').
        self.logs_epochs = layout == "hookbus" or self.schedule.is_empty
        #: Options and the background writer: :class:`hookbus.sink_api.WriterKit`.
        self.output: WriterKit[Point] = WriterKit(
            self.name,
            flush_secs=flush_secs,
            max_queue_size=max_queue_size,
            close_deadline=close_deadline,
            flush_deadline=flush_deadline,
        )
        self._suffix: str | None = None
        self._start_clean()
        _require_mlflow()  # after the arguments' checks, which need no MLflow

    def _start_clean(self) -> None:
        #: The MLflow run the shipper drives (its ``run_id`` once the server answered).
        self.run: TrackedRun | None = None
        self._spool: SpoolWriter | None = None
        self._lock: OutputLock | None = None  # the spool's, from begin to close
        self._held_settings: list[str] = []  # MLflow's settings this sink set (HTTP_BOUNDS)
        self._shipper: Shipper | None = None
        self._training: str | None = None  # this training's own id, once its spool is opened
        self._raised_refusal = False
        self._names: dict[str, str] = {}  # key -> MLflow name
        self._owners: dict[str, str] = {}  # MLflow name -> key
        self._loaded: Mapping[str, Any] | None = None
        self._opened = False
        self._wall_ms: int | None = None  # the newest event's wall time: the run's start, then its end
        self._stop: StopRequest | None = None
        self._error: BaseException | None = None
        # (step, clock, examples, seconds outside) of the last train point
        self._last_rate: tuple[int, float, int | None, float | None] | None = None
        self._exported = 0  # exports staged to ship in this run (log_model=True)
        self._existing: str | None = None  # run_id=: the user's run, resolved at begin
        self._samples_open = False  # the writer's thread only: samples spool between open and end

    @property
    def receives_epochs(self) -> bool:
        return True  # Keras epoch values go under their epoch/ names

    @property
    def resolved_tracking_uri(self) -> str:
        """The tracking URI the sink writes to (the default SQLite store's when none was given)."""
        if self.tracking_uri is not None:
            return self.tracking_uri
        return f"sqlite:///{(self.directory / 'mlflow.db').absolute()}"

    def set_output_suffix(self, suffix: str) -> None:
        """``runs_on="each"``: this worker's own run (its name and run key carry ``suffix``)."""
        self._suffix = suffix

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        self._start_clean()  # a new run: the MLflow run to continue comes only from a checkpoint

    def on_begin(self, event: Event) -> None:
        if self.output.writing:
            return  # a second publisher (eval) began in the same run
        known = sorted(k for k in self.context.known_keys if self.keys is None or k in self.keys)
        if self.layout == "hookbus":
            own = [name for name in _OWN_NAMES if name in known]
            if own:
                raise ValueError(f"{self.name} logs {own[0]!r} itself; a publisher's key of that name collides with it")
            self._names = check_names([*known, *_OWN_NAMES])
            self._owners = {n: k for k, n in self._names.items()}
        self._existing = self._given_run()
        self.output.prepare(self.directory, "its MLflow spool")
        plan = self._plan()
        spool = Spool(self.directory, plan.run_key, self.name)
        spool.lock.acquire()  # one training per directory and run key: a second fails before step 1
        self._lock = spool.lock
        try:
            writer = self._spool = SpoolWriter(spool)
            self.run = TrackedRun(plan, self._report, lambda training, run_id: spool.write_record(
                training=training, run_id=run_id, ended=None))  # fmt: skip
            self._shipper = Shipper(self.name, spool, self.run, self._redactor, self._waiting)
            self.output.start(
                self._spool_point,
                self._flush_spool,
                writer.close,
                target=f"its spool {str(self.directory)!r} for {self._redactor.shown}",
            )
        except BaseException:
            self._lock = None
            spool.lock.release()
            raise
        settings = {**HTTP_BOUNDS, **(QUIET_URL if self._redactor.shown != self._redactor.uri else {})}
        self._held_settings = hold_settings(settings)
        self._shipper.start()
        if event.mode == "test":  # a test evaluation creates no session: its run opens with it
            self._opened = True
            self._wall_ms = int(event.wall_time * 1000)
            self.output.call(functools.partial(self._open_spool, self._loaded, self._wall_ms))

    def _given_run(self) -> str | None:
        """``run_id=``'s run, a function's called now (at begin, on the training thread)."""
        given = self.run_id
        if given is None or isinstance(given, str):
            return given
        found = given()
        if not isinstance(found, str) or not found.strip():
            raise ValueError(f"run_id={given!r} returned {found!r}, not an MLflow run id")
        return found

    def _spool_point(self, point: Point) -> None:
        assert self._spool is not None
        self._spool.add(point)

    def _flush_spool(self) -> None:
        assert self._spool is not None
        self._spool.flush()
        if self._shipper is not None:
            self._shipper.wake()

    def _open_spool(self, state: Mapping[str, Any] | None, start_ms: int | None) -> None:
        assert self._spool is not None
        assert self.run is not None
        self._training = self._spool.start(self.run.plan, state, start_ms, self.continue_ended).training
        self._samples_open = True

    def _waiting(self) -> int:
        writer, shipper = self._spool, self._shipper
        if writer is None or shipper is None:
            return 0
        return max(0, writer.points + writer.backlog - shipper.processed)

    def _plan(self) -> RunPlan:
        task = self.context.task
        tags = dict(self.tags)
        run_name = self.run_name
        if self._suffix is not None:
            run_name = f"{run_name or self.experiment}.{self._suffix}"
        if self._existing is None:  # the user's run gets their tags alone
            tags.update(names_tags(self._names))
            if task is not None:
                tags["hookbus.task"] = f"{task.type}:{task.index}"
        key = self.run_key
        if key is None:
            identity = json.dumps([self.experiment, self.run_name, self._suffix])
            key = hashlib.sha256(identity.encode()).hexdigest()[:32]
        location = None if self.tracking_uri is not None else (self.directory / "artifacts").absolute().as_uri()
        return RunPlan(
            self.resolved_tracking_uri,
            self.experiment,
            location,
            run_name,
            key,
            tags,
            self._run_params(),
            shown_uri=self._redactor.shown,
            texts=self._run_texts(),
            existing_run=self._existing,
        )

    def _run_texts(self) -> dict[str, str]:
        """The model's summary as ``model_summary.txt``, where the publisher offers one (as MLflow's
        Keras callback logs it), with the training's params."""
        summary = self.context.model().summary() if self.log_training_params else None
        return {MODEL_SUMMARY: summary} if summary else {}

    def _run_params(self) -> dict[str, str]:
        """``hparams``, and the training's own parameters where its publisher offers them (``hparams``
        win a name both give)."""
        offered = self.context.model().training_params() if self.log_training_params else None
        if offered and self.layout == "keras":  # what MLflow's Keras callback logs: the optimizer's configuration
            offered = {k: v for k, v in offered.items() if k.startswith("optimizer_")}
        if not offered:
            return dict(self._params)
        names = check_names(offered, "the training's parameters")
        return {**{n: str(offered[k])[:MAX_PARAM_LENGTH] for k, n in names.items()}, **self._params}

    def on_session_created(self, event: Event) -> None:
        self._wall_ms = int(event.wall_time * 1000)
        if event.mode == "train":
            self._last_rate = None  # the rate restarts with each session
        run = self.run
        if run is None or self._opened or not self.output.writing:
            return
        self._opened = True  # the checkpoint sink (earlier in order) has loaded this session's state
        self.output.call(functools.partial(self._open_spool, self._loaded, self._wall_ms))

    def on_after_run(self, event: Event) -> None:
        if not self.output.writing:
            return
        shipper = self._shipper
        refused = shipper is not None and shipper.problem is not None and not shipper.unreachable
        if refused and not self._raised_refusal and shipper is not None:
            self._raised_refusal = True  # once: the bus reports the sink; the points stay in the spool
            raise RuntimeError(shipper.report())
        stamp = self._wall_ms = int(event.wall_time * 1000)
        mode = event.mode if event.mode in MODES else "train"
        if self.layout == "keras":
            for point in self._keras_points(event, mode, stamp):
                self.output.put(point)
            return
        values: dict[str, float] = {}
        new_names: dict[str, str] = {}
        for key, value in event.values.items():
            if not isinstance(value, float) or (self.keys is not None and key not in self.keys):
                continue
            if mode == "epoch" and not key.startswith(EPOCH_PREFIX):
                continue  # the epoch number itself; its values are the epoch/ keys
            if mode == "epoch" and self.keys is None and key.startswith(_VALIDATION):
                continue  # Keras's validation values: logged once, as the evaluation's eval/ names
            name = self._names[key] if key in self._names else self._name_of_new(key, new_names)
            if name:
                values[name] = value
        if mode == "train" and not event.final:
            now = self.context.clock()
            last, self._last_rate = self._last_rate, (event.step, now, event.examples, event.outside_secs)
            if last is not None and event.step > last[0] and now > last[1]:
                values[RATE_NAME] = (event.step - last[0]) / (now - last[1])
                examples, outside = last[2], last[3]
                if event.examples is not None and examples is not None and event.examples >= examples:
                    values[EXAMPLES_NAME] = (event.examples - examples) / (now - last[1])
                if event.outside_secs is not None and outside is not None:
                    values[OUTSIDE_NAME] = max(0.0, event.outside_secs - outside) / (event.step - last[0])
        if values:
            tags = names_tags(self._names) if new_names else {}
            self.output.put(Point(mode, event.step, stamp, values, tags))

    def _keras_points(self, event: Event, mode: str, stamp: int) -> list[Point]:
        """``layout="keras"``: an event's values as MLflow's Keras callback logs them."""
        values = {
            k: v for k, v in event.values.items() if isinstance(v, float) and (self.keys is None or k in self.keys)
        }
        if mode == "train":
            named = {mlflow_name(k): v for k, v in values.items()}
            return [Point(mode, event.step, stamp, named)] if named else []
        if mode == "test":  # evaluate outside fit: its on_test_end values, at no step (0)
            named = {mlflow_name(KERAS_VALIDATION + k.partition("/")[2]): v for k, v in values.items()}
            return [Point(mode, event.step, stamp, named, logged_step=0)] if named else []
        if mode != "epoch":
            return []  # fit's validation: from the epoch's logs, which hold every val_ value
        points = []
        validation = {
            mlflow_name(KERAS_VALIDATION + k[len(_VALIDATION) :]): v
            for k, v in values.items()
            if k.startswith(_VALIDATION)
        }
        if validation:  # its on_test_end, before the epoch's values: at no step (0)
            points.append(Point("eval", event.step, stamp, validation, logged_step=0))
        epoch = event.values.get("epoch")
        named = {mlflow_name(k[len(EPOCH_PREFIX) :]): v for k, v in values.items() if k.startswith(EPOCH_PREFIX)}
        if self.logs_epochs and named and isinstance(epoch, int | float):
            points.append(Point(mode, event.step, stamp, named, logged_step=int(epoch)))  # at the epoch's index
        return points

    def _name_of_new(self, key: str, new_names: dict[str, str]) -> str:
        """A key first seen after begin (a Keras epoch value): its name, or ``""`` on a collision."""
        name = mlflow_name(key)
        other = self._owners.get(name)
        if other is not None and other != key:
            logger.warning(
                "%s: key %r maps to the MLflow name %r of key %r (hookbus.sinks.mlflow_name); it is not logged",
                self.name,
                key,
                name,
                other,
            )
            self._names[key] = ""  # reported once; never logged
            return ""
        self._names[key], self._owners[name] = name, key
        new_names[key] = name
        return name

    def on_system(self, event: Event) -> None:
        """A sample of the machine (called on the sampler's thread, never the training thread):
        its ``system/`` values as the run's next system-metrics point, under MLflow's own names, at
        the sample's number as step and its wall time, as MLflow's system-metrics monitor logs
        them, so MLflow's System metrics tab shows them; once across kills and resumes. Not under
        ``layout="keras"``: MLflow's Keras callback logs no system metrics, and that layout logs what
        it logs."""
        if not self.system or self.layout == "keras":
            return
        values = {k: v for k, v in event.values.items() if k.startswith(SYSTEM_PREFIX) and _number(v)}
        if not values or not self.output.writing:
            return
        # The writer's queue is thread-safe; the spool is touched on the writer's thread only. A
        # writer that ended (the run is closing) takes no more: the bus's report of it says why.
        with contextlib.suppress(WriterError):
            self.output.call(functools.partial(self._spool_sample, int(event.wall_time * 1000), values))

    def _spool_sample(self, timestamp_ms: int, values: dict[str, float]) -> None:
        if self._samples_open and self._spool is not None:  # before the run opens / after its end: none
            self._spool.add_sample(timestamp_ms, {k: float(v) for k, v in values.items()})
            self._wall_ms = max(self._wall_ms or 0, timestamp_ms)

    def _end_spool(self, spool: SpoolWriter, status: str, tags: dict[str, str], end_ms: int) -> None:
        self._samples_open = False
        spool.end(status, tags, end_ms)

    def on_model_exported(self, event: ModelExported) -> None:
        """``log_model=True``: stage the export to ship as the artifact ``model`` (on the writer's thread)."""
        if not self.log_model or not self._opened or not self.output.writing:
            return
        self._exported += 1
        self.output.call(functools.partial(self._stage_model, event))

    def _stage_model(self, event: ModelExported) -> None:
        assert self._spool is not None
        if not self._spool.add_model(event.step, event.path, event.kind):
            logger.warning(
                "%s: the export of step %d (%s) was gone before it could be staged; a later export ships instead",
                self.name,
                event.step,
                event.path,
            )

    def on_stop_requested(self, event: StopRequest) -> None:
        if self._stop is None:
            self._stop = event

    def on_exception(self, event: ExceptionRaised) -> None:
        self._error = event.error

    def state_dict(self) -> dict[str, Any]:
        """This training's id, its MLflow run (``None`` while the server has not answered yet)
        and the last step of each mode the run holds (after :meth:`flush`)."""
        run, training = self.run, self._training
        if run is None or training is None or not self.output.writing:
            return {}
        mine = run.training == training and run.run_id is not None
        return {
            "training": training,
            "run_id": run.run_id if mine else None,
            "shipped": dict(run.shipped) if mine else {},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The run to continue at this run's first session (saved by :meth:`state_dict`)."""
        self._loaded = dict(state)

    def flush(self) -> None:
        """Block until every point received so far is in the spool, handed to the OS (the
        checkpoint barrier); never waits for the network."""
        self.output.flush()

    def writer_stats(self) -> WriterStats | None:
        """Points queued and spooled by this run's writer, and while MLflow does not take them, why
        (``unreachable``; see :meth:`hookbus.EventBus.stats`)."""
        stats = self.output.stats()
        shipper = self._shipper
        report = shipper.report() if shipper is not None else None
        if stats is None or report is None:
            return stats
        return dataclasses.replace(stats, unreachable=report)

    def status(self) -> str | None:
        """While MLflow does not take the points: the server (redacted) and why; else ``None``."""
        shipper = self._shipper
        if shipper is None or shipper.problem is None:
            return None
        what = "unreachable" if shipper.unreachable else "refuses requests"
        return f"MLflow {self._redactor.shown} {what} ({shipper.problem}); points wait in the spool"

    def close(self) -> None:
        """End the run (its status in the spool), then ship the spool within ``close_deadline``;
        what could not ship waits in the spool for the next start in the same directory, which ships
        it to this run; idempotent."""
        shipper, spool, lock = self._shipper, self._spool, self._lock
        if self.log_model and lock is not None and self._opened and not self._exported:
            logger.warning(
                "%s: log_model=True, but no model was exported in this run: attach hookbus.sinks.ExportSink(...) "
                "to the same bus (it exports; this sink ships what it exports)",
                self.name,
            )
        self._lock = None
        began = time.monotonic()
        try:
            try:
                if self._opened and self.output.writing and not self.output.stalled and spool is not None:
                    status, tags = self._ending()
                    end = self._wall_ms if self._wall_ms is not None else int(time.time() * 1000)  # a replay's too
                    self.output.call(functools.partial(self._end_spool, spool, status, tags, end))
            finally:
                self.output.close()
            if shipper is not None and lock is not None:
                deadline = self.output.close_deadline
                if self.resolved_tracking_uri.startswith("sqlite:"):
                    # A local store: its first use runs MLflow's migrations, which an exit would cut in
                    # half; it gets the flush deadline too (a try that fails still ends the wait).
                    deadline = max(deadline, self.output.flush_deadline)
                left = deadline - (time.monotonic() - began)
                if not shipper.finish(left):
                    self._left_in_spool(shipper)
        finally:
            if lock is not None:  # the shipper stays readable: its last report stays in bus.stats()
                lock.release()
                held, self._held_settings = self._held_settings, []
                release_settings(held)

    def _left_in_spool(self, shipper: Shipper) -> None:
        waiting = self._waiting()
        problem = f" {'unreachable' if shipper.unreachable else 'refused a request'} ({shipper.problem})"
        logger.warning(
            "%s: %s%s; %d point%s and the run's end wait in the spool in %s: they ship to this run at the next start "
            "in the same directory",
            self.name,
            self._redactor.shown,
            problem if shipper.problem is not None else " did not take them within the close deadline",
            waiting,
            "s" if waiting != 1 else "",
            repr(str(self.directory)),
        )

    def _ending(self) -> tuple[str, dict[str, str]]:
        """How the run ended: its MLflow status and the tags that say so (the one word, ``hookbus.end``)."""
        stop, error = self._stop, self._error
        context = self._context
        tags = {"hookbus.final_step": str(context.current_step() if context is not None else 0)}
        if stop is not None:
            tags["hookbus.stop_reason"] = stop.reason[:8000]
        word = how_ended(stop, error)
        if error is not None and not isinstance(error, KeyboardInterrupt):
            tags["hookbus.error"] = self._redactor.scrub(f"{type(error).__name__}: {error}")[:8000]
        tags["hookbus.end"] = word
        return TRACKER_STATUS[word], tags

    def _report(self, message: str) -> None:
        # From the shipper's thread: logged like the bus's own reports of a sink's errors.
        logger.warning("%s: %s", self.name, self._redactor.scrub(message))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _require_mlflow() -> None:
    try:
        import mlflow.tracking  # noqa: F401 - the client the writer uses
    except ImportError as error:
        raise ImportError(
            f"MLflowSink needs MLflow, which is not installed ({error}): pip install 'hookbus[mlflow]'"
        ) from error


def _text(argument: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{argument} must be a non-empty string (got {value!r})")
    return value
