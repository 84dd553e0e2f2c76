"""MLflowSink: the run in an MLflow tracking store, each step's point once across kills and resumes.

Written with hookbus's sink authors' module only (``hookbus.sink_api``), as every built-in sink is.
MLflow is an optional extra (``pip install 'hookbus[mlflow]'``): it is imported when the sink is
made, never by ``import hookbus.sinks``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from hookbus.sink_api import (
    DEFAULT_FLUSH_DEADLINE,
    EPOCH_PREFIX,
    Event,
    ExceptionRaised,
    Schedule,
    Sink,
    SinkContext,
    StopRequest,
    WriterKit,
    WriterStats,
)
from hookbus.validate import flag

from ._names import check_names, mlflow_name, names_tags
from ._run import MODES, Point, RunPlan, TrackedRun

__all__ = ["MLflowSink"]

logger = logging.getLogger("hookbus")

HParamValue = bool | int | float | str
RATE_NAME = "steps/sec"
_RUN_KEY = re.compile(r"^[\w.\-:/]{1,250}$")


class MLflowSink(Sink):
    """Logs the run to MLflow: params, metrics by step, the stop reason and how the run ended.

    What goes where: ``hparams`` as params; train values as metrics at their step; evaluations
    under their ``eval/`` names at the training step evaluated; Keras epoch values under
    ``epoch/`` names at the step the epoch ended; ``steps/sec`` between due train steps; each
    point timestamped with its event's own wall time. Keys become MLflow names by
    :func:`mlflow_name` (one rule; a collision fails at begin naming both keys; the run's tag
    ``hookbus.names`` records every changed name). Scalars only (arrays and bytes are not logged).

    Exactly once: points ship at once, on the background writer (``log_batch``, at most 900
    metrics and 100 tags a call), each batch tagged in the same call with the last step of each
    mode it holds (``hookbus.shipped.train`` / ``.eval`` / ``.epoch``). The MLflow run id and those
    steps are the sink's state through the checkpoint barrier; a session restored from a
    checkpoint continues the same run, and drops every point whose step the run already holds
    (the larger of the checkpoint's state and the run's tags). Trade-off: the steps re-run after a
    restore keep their first values in MLflow (the same values when training is deterministic;
    CSV files keep the re-run's); in exchange the tracker is live, not a checkpoint behind. One
    point per mode and step: evaluating a step twice ships the first.

    The run: with no state to continue, the newest RUNNING run of the experiment with the same
    run key (tag ``hookbus.run_key``) whose process is gone (tags ``hookbus.host``,
    ``hookbus.pid``) is continued, so a kill before the first checkpoint leaves no orphan beside
    a new run; a live process's run fails the sink. Else a new run. A continued run is RUNNING
    again; a param whose value changed keeps its first value (MLflow refuses a change) and the
    change is tagged ``hookbus.param_changed.<name>``. At close: FINISHED (a normal end, early
    stopping, stop-at-step), KILLED (a stop by signal: SIGTERM, Ctrl-C), FAILED (an exception),
    with tags ``hookbus.stop_reason``, ``hookbus.end`` and ``hookbus.final_step``.

    Never slows or stops training: every call to MLflow runs on the background writer; a failing
    or unreachable store fails the writer, which the bus reports and isolates (``bus.stats()``),
    and a flush past ``flush_deadline`` (the barrier, a session's end) disables the sink.

    Args:
        tracking_uri: Where the runs go (any MLflow tracking URI: ``sqlite:///...``,
            ``http://host:5000``, ...). Default ``None``: ``sqlite:///<directory>/mlflow.db``, with
            artifacts in ``<directory>/artifacts`` (``mlflow ui --backend-store-uri
            sqlite:///<directory>/mlflow.db`` shows it).
        experiment: The experiment's name, created when missing (default ``"hookbus"``).
        run_name: The run's name (default ``None``: MLflow picks one).
        hparams: Hyperparameters (name to bool, int, float or str), logged as params.
        tags: Run tags (valid MLflow names to strings).
        every_n_steps: Log train values every n steps (default 10 when no schedule argument is
            given; schedule arguments replace the default as a whole).
        keys: Keys to log (default ``None``: every scalar key).
        directory: The run's directory, for the default SQLite store (default ``"mlruns"``).
        run_key: The run's identity, to continue a RUNNING run left by a killed process (default:
            a digest of ``experiment``, ``run_name`` and the worker under ``runs_on="each"``).
            Characters ``[\\w.\\-:/]``, at most 250.
        continue_ended: Also continue an ended run (FINISHED, KILLED, FAILED) of the same
            ``run_key``, adding only the steps it lacks (default ``False``: a second training is
            a new run). For uploads of one recorded run: ``hookbus replay --mlflow`` run twice
            adds nothing the first upload shipped.
        every_n_secs: Also (or instead) log every t seconds (default ``None``).
        flush_secs: Longest time points wait before they ship (default 5.0).
        max_queue_size: Events that may wait before training blocks (default 1024).
        close_deadline: Seconds ``close`` waits for the writer (default 10.0).
        flush_deadline: Seconds a flush may take (default 30.0).
        priority, on_error, name: See :class:`hookbus.Sink` (default ``on_error="isolate"``).
        runs_on: ``"chief"`` (default: one run, from the chief) or ``"each"`` (one run per worker,
            tagged ``hookbus.task``); ``"all"`` is refused (every worker in one run).

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
        every_n_secs: float | None = None,
        flush_secs: float = 5.0,
        max_queue_size: int = 1024,
        close_deadline: float = 10.0,
        flush_deadline: float = DEFAULT_FLUSH_DEADLINE,
        priority: int | None = None,
        on_error: str | None = None,
        name: str | None = None,
        runs_on: str | None = None,
    ) -> None:
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
        if tracking_uri is not None and urlsplit(tracking_uri).scheme in ("", "file"):
            raise ValueError(
                f"tracking_uri {tracking_uri!r} names MLflow's file store, which MLflow refuses since 3.13: use a "
                "database (sqlite:///path/mlflow.db), a server (http://host:5000), or None (SQLite under directory)"
            )
        self.tracking_uri = tracking_uri
        if tracking_uri is None:
            directory = WriterKit.directory_path("directory", directory)
        self.directory = Path(directory)
        self.experiment = _text("experiment", experiment)
        self.run_name = None if run_name is None else _text("run_name", run_name)
        if hparams is not None and not (
            isinstance(hparams, Mapping)
            and all(isinstance(k, str) and isinstance(v, HParamValue) for k, v in hparams.items())
        ):
            raise ValueError(f"hparams must map names to bool, int, float or str (got {hparams!r})")
        self.hparams = dict(hparams or {})
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
        #: Options and the background writer: :class:`hookbus.WriterKit`.
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
        self.run: TrackedRun | None = None
        self._names: dict[str, str] = {}  # key -> MLflow name
        self._owners: dict[str, str] = {}  # MLflow name -> key
        self._loaded: Mapping[str, Any] | None = None
        self._opened = False
        self._wall_ms: int | None = None  # the newest event's wall time: the run's start, then its end
        self._stop: StopRequest | None = None
        self._error: BaseException | None = None
        self._last_rate: tuple[int, float] | None = None  # (step, clock) of the last train point

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
        if RATE_NAME in known:
            raise ValueError(f"{self.name} logs {RATE_NAME!r} itself; a publisher's key of that name collides with it")
        self._names = check_names([*known, RATE_NAME])
        self._owners = {n: k for k, n in self._names.items()}
        if self.tracking_uri is None:
            self.output.prepare(self.directory, "its MLflow store")
        self.run = TrackedRun(self._plan(), self._report)
        self.output.start(
            self.run.add,
            self.run.ship,
            None,
            landed=lambda: 0 if self.run is None else self.run.landed,
            target=repr(self.resolved_tracking_uri),
        )

    def _plan(self) -> RunPlan:
        task = self.context.task
        tags = dict(self.tags)
        tags.update(names_tags(self._names))
        run_name = self.run_name
        if self._suffix is not None:
            run_name = f"{run_name or self.experiment}.{self._suffix}"
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
            self._params,
            continue_ended=self.continue_ended,
        )

    def on_session_created(self, event: Event) -> None:
        self._wall_ms = int(event.wall_time * 1000)
        if event.mode == "train":
            self._last_rate = None  # the rate restarts with each session
        run = self.run
        if run is None or self._opened or not self.output.writing:
            return
        self._opened = True  # the checkpoint sink (earlier in order) has loaded this session's state
        self.output.call(functools.partial(run.open, self._loaded, self._wall_ms))

    def on_after_run(self, event: Event) -> None:
        if not self.output.writing:
            return
        stamp = self._wall_ms = int(event.wall_time * 1000)
        mode = event.mode if event.mode in MODES else "train"
        values: dict[str, float] = {}
        new_names: dict[str, str] = {}
        for key, value in event.values.items():
            if not isinstance(value, float) or (self.keys is not None and key not in self.keys):
                continue
            if mode == "epoch" and not key.startswith(EPOCH_PREFIX):
                continue  # the epoch number itself; its values are the epoch/ keys
            name = self._names[key] if key in self._names else self._name_of_new(key, new_names)
            if name:
                values[name] = value
        if mode == "train" and not event.final:
            now = self.context.clock()
            last, self._last_rate = self._last_rate, (event.step, now)
            if last is not None and event.step > last[0] and now > last[1]:
                values[RATE_NAME] = (event.step - last[0]) / (now - last[1])
        if values:
            tags = names_tags(self._names) if new_names else {}
            self.output.put(Point(mode, event.step, stamp, values, tags))

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

    def on_stop_requested(self, event: StopRequest) -> None:
        if self._stop is None:
            self._stop = event

    def on_exception(self, event: ExceptionRaised) -> None:
        self._error = event.error

    def state_dict(self) -> dict[str, Any]:
        """The MLflow run and the last step of each mode it holds (after :meth:`flush`)."""
        run = self.run
        if run is None or run.run_id is None or not self.output.writing:
            return {}
        return {"run_id": run.run_id, "shipped": dict(run.shipped)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The run to continue at this run's first session (saved by :meth:`state_dict`)."""
        self._loaded = dict(state)

    def flush(self) -> None:
        """Block until every point received so far is in MLflow (the checkpoint barrier)."""
        self.output.flush()

    def writer_stats(self) -> WriterStats | None:
        """Events queued and shipped by this run's writer (see :meth:`hookbus.EventBus.stats`)."""
        return self.output.stats()

    def close(self) -> None:
        """Ship what is queued, end the MLflow run with its status (within ``close_deadline``); idempotent."""
        try:
            run = self.run
            if run is not None and self.output.writing and not self.output.stalled:
                status, tags = self._ending()
                end = self._wall_ms if self._wall_ms is not None else int(time.time() * 1000)  # a replay's too
                self.output.call(functools.partial(run.finish, status, tags, end))
        finally:
            self.output.close()

    def _ending(self) -> tuple[str, dict[str, str]]:
        """How the run ended: its MLflow status and the tags that say so."""
        stop, error = self._stop, self._error
        context = self._context
        tags = {"hookbus.final_step": str(context.current_step() if context is not None else 0)}
        if stop is not None:
            tags["hookbus.stop_reason"] = stop.reason[:8000]
        if isinstance(error, KeyboardInterrupt) or (error is None and stop is not None and stop.source == "signal"):
            status, end = "KILLED", "killed"
        elif error is not None:
            status, end = "FAILED", "failed"
            tags["hookbus.error"] = f"{type(error).__name__}: {error}"[:8000]
        else:
            status, end = "FINISHED", "finished"
        tags["hookbus.end"] = end
        return status, tags

    def _report(self, message: str) -> None:
        # From the writer's thread: logged like the bus's own reports of a sink's errors.
        logger.warning("%s: %s", self.name, message)


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
