"""The MLflow run as :class:`~hookbus.sinks.MLflowSink`'s shipper drives it.

Everything here runs on the shipper's thread (never on the training thread): finding or creating
the run, shipping points in ``log_batch`` calls within MLflow's limits, and ending the run. The
exactly-once rule lives here: every batch carries, in the same ``log_batch`` call (one
transaction in a SQL store, one request to a server), the tags ``hookbus.shipped.<mode>`` with
the last step of each mode it completes; a run that continues drops every point at or before the
step its store says was shipped.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow.entities import Metric, Run
    from mlflow.tracking import MlflowClient

__all__ = [
    "MAX_METRICS_PER_BATCH",
    "MAX_TAGS_PER_BATCH",
    "MODEL_ARTIFACT",
    "MODES",
    "SYSTEM",
    "Point",
    "RunPlan",
    "TrackedRun",
]

#: MLflow's ``log_batch`` limits: 1000 entities a call, at most 100 of them params or tags. A
#: call with points holds at most 900 metrics, so that 100 tags fit beside them.
MAX_ENTITIES_PER_BATCH = 1000
MAX_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = MAX_ENTITIES_PER_BATCH - MAX_TAGS_PER_BATCH
#: The modes of points, each with its own shipped step (an evaluation at S after training at S).
#: ``system``: the machine's samples, whose step is the sample's number in the run (0, 1, 2, ...),
#: as MLflow's own system-metrics monitor numbers them, not a training step.
MODES = ("train", "eval", "epoch", "test", "system")
SYSTEM = "system"
SHIPPED_TAG = "hookbus.shipped."
RUN_KEY_TAG = "hookbus.run_key"
HOST_TAG = "hookbus.host"
PID_TAG = "hookbus.pid"
TRAINING_TAG = "hookbus.training"  # the training a run belongs to (the sink's id file names it)
_RUNNING = "RUNNING"
MODEL_ARTIFACT = "model"  # where log_model=True puts the newest export, one name for every export


@dataclass(frozen=True)
class RunPlan:
    """What the sink decided before step 1 about its run (names mapped, values as strings)."""

    tracking_uri: str
    experiment: str
    artifact_location: str | None
    run_name: str | None
    run_key: str
    tags: Mapping[str, str]
    params: Mapping[str, str]
    shown_uri: str = ""  # the URI as messages show it (its credentials redacted)
    texts: Mapping[str, str] = field(default_factory=dict)  # artifacts: file name to text
    #: A run of the user's (``MLflowSink(run_id=...)``): logged into as it is, never created, its
    #: status never changed, none of hookbus's tags added.
    existing_run: str | None = None


@dataclass
class Point:
    """One event's metrics (MLflow names to values), at a step of a mode, with extra run tags."""

    mode: str
    step: int
    timestamp_ms: int
    values: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)
    #: The step MLflow gets where it is not ``step`` (``layout="keras"``: the epoch's index, 0 for a
    #: validation); ``step`` still orders the mode's points for the exactly-once rule.
    logged_step: int | None = None


class TrackedRun:
    """One MLflow run as the shipper drives it: opened when the server answers, fed points, ended.

    Args:
        plan: The run's settings.
        report: Logs a message (a changed param, a checkpoint's run that is gone); redacted.
        record: Keeps the run's id beside the run's outputs (the sink's id file), called the
            moment a run is created or continued, with the training and the run id.
    """

    def __init__(
        self, plan: RunPlan, report: Callable[[str], None], record: Callable[[str, str], None] | None = None
    ) -> None:
        self.plan = plan
        self._report = report
        self._record = record
        self._client: MlflowClient | None = None
        self.run_id: str | None = None
        self.training: str | None = None
        self.resumed = False
        #: The last step of each mode MLflow holds (acknowledged by a ``log_batch``).
        self.shipped: dict[str, int] = dict.fromkeys(MODES, -1)
        self._queued: dict[str, int] = dict.fromkeys(MODES, -1)  # shipped, or waiting in _pending
        self._pending: list[Point] = []
        self._waiting = 0  # metrics in _pending
        self._pending_tags: dict[str, str] = {}
        #: Points in MLflow (or dropped as already there).
        self.landed = 0
        #: A user's run (``plan.existing_run``): ``(name, step, timestamp)`` of the metrics it held when
        #: this process opened it; a value of the same three is already there.
        self._held: set[tuple[str, int, int]] = set()

    # -- resolving the run ----------------------------------------------------------------
    def open(
        self,
        training: str,
        *,
        run_id: str | None = None,
        known_run_id: str | None = None,
        new: bool = False,
        by_run_key: bool = False,
        start_ms: int | None = None,
        run_name: str | None = None,
        params: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
        texts: Mapping[str, str] | None = None,
    ) -> None:
        """Continue or create the run of ``training``, starting at ``start_ms``; RUNNING, params checked.

        Which run, in order: ``run_id`` (the restored checkpoint's), ``known_run_id`` (the id
        file's, for this training), the run tagged with this training (created by a request whose
        answer was lost), with ``by_run_key`` the newest run of the run key (replay uploads), else
        a new one (``new``: the directory's previous training ended, so only its own tag counts).
        ``run_name``, ``params``, ``tags`` and ``texts`` (artifacts: a file name to its text,
        written again at every opening, the same file replaced) are that training's (default:
        this plan's).
        """
        client = self._client = self._client or _client(self.plan.tracking_uri)
        if self.plan.existing_run is not None:
            self._open_existing(client, training, run_id or known_run_id or self.plan.existing_run, params, tags, texts)
            return
        experiment_id = self._experiment_id(client)
        run = None
        for candidate in (run_id, known_run_id):
            run = run or self._existing(client, candidate)
        if run is None:
            run = self._tagged(client, experiment_id, f"tags.`{TRAINING_TAG}` = '{training}'")
        if run is None and by_run_key and not new:
            run = self._tagged(client, experiment_id, f"tags.`{RUN_KEY_TAG}` = '{self.plan.run_key}'")
            if run is not None:
                self._report(
                    f"continuing MLflow run {run.info.run_id} ({run.info.status}) of run_key {self.plan.run_key!r}"
                )
        identity = {
            RUN_KEY_TAG: self.plan.run_key,
            TRAINING_TAG: training,
            HOST_TAG: socket.gethostname(),
            PID_TAG: str(os.getpid()),
        }
        changed = run is None or run.info.run_id != self.run_id
        if changed:
            self.shipped = dict.fromkeys(MODES, -1)
        if run is None:
            name = self.plan.run_name if params is None else run_name
            run = client.create_run(experiment_id, start_time=start_ms, run_name=name, tags=identity)
            self.resumed = False
        else:
            self.resumed = True
            client.update_run(run.info.run_id, status=_RUNNING)
            for mode in MODES:
                stored = run.data.tags.get(SHIPPED_TAG + mode)
                if stored is not None and stored.lstrip("-").isdigit():
                    self.shipped[mode] = max(self.shipped[mode], int(stored))
        self.run_id, self.training = run.info.run_id, training
        if self._record is not None:
            self._record(training, run.info.run_id)  # the moment it exists: a restart here continues it
        self.reset()
        given = {**(self.plan.tags if tags is None else tags), **identity}
        new_params = self._new_params(
            run if self.resumed else None, given, self.plan.params if params is None else params
        )
        self._log(params=new_params, tags=given)
        for name, text in (self.plan.texts if texts is None else texts).items():
            client.log_text(run.info.run_id, text, name)

    def _open_existing(
        self,
        client: MlflowClient,
        training: str,
        run_id: str,
        params: Mapping[str, str] | None,
        tags: Mapping[str, str] | None,
        texts: Mapping[str, str] | None,
    ) -> None:
        """Log into the user's run ``run_id`` as it is: never created, its status left, no hookbus tags.

        Without the ``hookbus.shipped.<mode>`` tags the run itself is the record: a value whose
        name, step and timestamp the run already holds landed before (a kill after a ``log_batch``
        but before the id file said so), and is dropped.
        """
        run = client.get_run(run_id)  # a missing run is refused: reported, retried, never replaced
        if run.info.lifecycle_stage == "deleted":
            raise ValueError(f"the MLflow run {run_id} was deleted; MLflowSink(run_id=...) logs into an existing run")
        if run_id != self.run_id or training != self.training:  # another training's steps start again
            self.shipped = dict.fromkeys(MODES, -1)
            self._held = {
                (m.key, m.step, m.timestamp) for key in run.data.metrics for m in client.get_metric_history(run_id, key)
            }
        self.resumed = True
        self.run_id, self.training = run_id, training
        if self._record is not None:
            self._record(training, run_id)
        self.reset()
        changes: dict[str, str] = {}  # a changed param keeps its first value: reported, never tagged here
        new_params = self._new_params(run, changes, self.plan.params if params is None else params)
        self._log(params=new_params, tags=dict(self.plan.tags if tags is None else tags))
        for name, text in (self.plan.texts if texts is None else texts).items():
            client.log_text(run_id, text, name)

    def _experiment_id(self, client: MlflowClient) -> str:
        from mlflow.exceptions import MlflowException

        found = client.get_experiment_by_name(self.plan.experiment)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                client.restore_experiment(found.experiment_id)
            return str(found.experiment_id)
        try:
            return str(client.create_experiment(self.plan.experiment, artifact_location=self.plan.artifact_location))
        except MlflowException as error:  # another worker made it between the two calls
            again = client.get_experiment_by_name(self.plan.experiment)
            if again is None:
                raise error from None
            return str(again.experiment_id)

    def _existing(self, client: MlflowClient, run_id: str | None) -> Run | None:
        if run_id is None:
            return None
        from mlflow.exceptions import MlflowException

        try:
            run = client.get_run(run_id)
        except MlflowException as error:
            if error.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise  # the server did not answer: try again later, never a second run
            self._report(f"the MLflow run {run_id} is not in {self.plan.shown_uri}: a new run")
            return None
        if run.info.lifecycle_stage == "deleted":
            self._report(f"the MLflow run {run_id} was deleted: a new run")
            return None
        return run

    def _tagged(self, client: MlflowClient, experiment_id: str, condition: str) -> Run | None:
        runs = client.search_runs(
            [experiment_id], filter_string=condition, order_by=["attributes.start_time DESC"], max_results=1
        )
        return runs[0] if runs else None

    def reset(self) -> None:
        """Forget what waits unshipped (after a failed call: the shipper reads it again from the spool)."""
        self._pending, self._waiting, self._pending_tags = [], 0, {}
        self._queued = dict(self.shipped)

    def _new_params(self, run: Run | None, tags: dict[str, str], params: Mapping[str, str]) -> dict[str, str]:
        """The params to log: all on a new run; on a continued one, those it lacks (a changed
        value keeps the first, as MLflow refuses to change a param, and is tagged)."""
        if run is None:
            return dict(params)
        logged = run.data.params
        new: dict[str, str] = {}
        for name, value in params.items():
            first = logged.get(name)
            if first is None:
                new[name] = value
            elif first != value:
                tags[f"hookbus.param_changed.{name}"[:250]] = json.dumps({"first": first, "now": value})[:8000]
                self._report(f"param {name!r} was {first!r} in this run, now {value!r}: MLflow keeps the first")
        return new

    # -- points -------------------------------------------------------------------------------
    def add(self, point: Point) -> None:
        """Take one event's point (the writer's ``write``); a step MLflow holds already is dropped."""
        self._pending_tags.update(point.tags)
        if point.step <= self._queued[point.mode]:
            self.landed += 1  # re-run after a restore: its first value is in MLflow
            return
        self._queued[point.mode] = point.step
        if self._held:
            step = point.step if point.logged_step is None else point.logged_step
            for name in list(point.values):
                if (name, step, point.timestamp_ms) in self._held:
                    del point.values[name]  # landed before a kill
            if not point.values:
                self.landed += 1
                return
        self._pending.append(point)
        self._waiting += len(point.values)
        if self._waiting >= MAX_METRICS_PER_BATCH:
            self.ship()

    def ship(self) -> None:
        """Send every waiting point, in ``log_batch`` calls of at most 900 metrics (the writer's flush)."""
        from mlflow.entities import Metric

        while self._pending or self._pending_tags:
            metrics: list[Metric] = []
            shipped: dict[str, int] = {}
            whole = 0
            for point in self._pending:
                if len(metrics) + len(point.values) > MAX_METRICS_PER_BATCH:
                    break
                step = point.step if point.logged_step is None else point.logged_step
                metrics += [Metric(k, v, point.timestamp_ms, step) for k, v in point.values.items()]
                shipped[point.mode] = point.step
                whole += 1
            if whole == 0 and self._pending:  # a step with more than 900 values: in parts, tagged at its last
                point = self._pending[0]
                names = list(point.values)[:MAX_METRICS_PER_BATCH]
                step = point.step if point.logged_step is None else point.logged_step
                metrics = [Metric(k, point.values.pop(k), point.timestamp_ms, step) for k in names]
            tags = dict(self._pending_tags)
            if self.plan.existing_run is None:  # a user's run gets none of hookbus's tags
                tags.update({SHIPPED_TAG + m: str(s) for m, s in shipped.items()})
            self._log(metrics=metrics, tags=tags)
            del self._pending[:whole]
            self._waiting -= len(metrics)
            self._pending_tags = {}
            self.shipped.update(shipped)
            self.landed += whole

    def log_model(self, staged: str) -> None:
        """Upload the export staged in the directory ``staged`` as the artifact ``model`` (its files
        replace the previous export's of the same names)."""
        if self.run_id is None or self._client is None:
            return
        self._client.log_artifacts(self.run_id, staged, MODEL_ARTIFACT)

    def finish(self, status: str, tags: Mapping[str, str], end_time_ms: int) -> None:
        """Ship what waits, tag how the run ended and end it with ``status``."""
        if self.run_id is None or self._client is None:
            return
        if self.plan.existing_run is not None:  # the user's run: its points shipped, its status theirs
            self.ship()
            return
        self._pending_tags.update(tags)
        self.ship()
        self._client.set_terminated(self.run_id, status=status, end_time=end_time_ms)

    def _log(
        self,
        *,
        metrics: list[Metric] | None = None,
        params: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """``log_batch`` calls within MLflow's limits: params and tags 100 a call, the last tags
        (the shipped steps, put last) in the call with the metrics, so they land together."""
        from mlflow.entities import Param, RunTag

        client, run_id = self._client, self.run_id
        assert client is not None
        assert run_id is not None
        param_list = [Param(k, v) for k, v in (params or {}).items()]
        tag_list = [RunTag(k, v) for k, v in (tags or {}).items()]
        while len(param_list) > MAX_TAGS_PER_BATCH:
            chunk, param_list = param_list[:MAX_TAGS_PER_BATCH], param_list[MAX_TAGS_PER_BATCH:]
            client.log_batch(run_id, params=chunk, synchronous=True)
        while len(tag_list) > MAX_TAGS_PER_BATCH:
            tag_chunk, tag_list = tag_list[:MAX_TAGS_PER_BATCH], tag_list[MAX_TAGS_PER_BATCH:]
            client.log_batch(run_id, tags=tag_chunk, synchronous=True)
        if metrics or param_list or tag_list:
            client.log_batch(run_id, metrics=metrics or [], params=param_list, tags=tag_list, synchronous=True)


def _client(tracking_uri: str) -> MlflowClient:
    from mlflow.tracking import MlflowClient

    _create_sqlite_store(tracking_uri)
    return MlflowClient(tracking_uri=tracking_uri)


def _create_sqlite_store(tracking_uri: str) -> None:
    """Make a SQLite store that does not exist yet beside it, then move it into place: MLflow's first
    use of a store runs its migrations, and a process killed halfway through them leaves a store no
    later start can open (``table datasets already exists``); a kill here leaves only the temporary file."""
    if not tracking_uri.startswith("sqlite:///"):
        return
    path = tracking_uri[len("sqlite:///") :].split("?", 1)[0]
    if not path or path == ":memory:" or os.path.exists(path):
        return
    from mlflow.tracking import MlflowClient

    directory, name = os.path.split(os.path.abspath(path))
    prefix = f".{name}.creating-"
    for stale in os.listdir(directory):
        pid = stale[len(prefix) :].split("-", 1)[0]  # SQLite's own files beside it: <name>-journal, -wal
        if stale.startswith(prefix) and pid.isdigit() and not _alive(int(pid)):
            os.remove(os.path.join(directory, stale))  # left by a start killed while it made the store
    temporary = os.path.join(directory, f"{prefix}{os.getpid()}")
    if os.path.exists(temporary):
        os.remove(temporary)  # this process's own earlier try, cut short by an error
    MlflowClient(tracking_uri=f"sqlite:///{temporary}").search_experiments()  # runs the migrations
    try:
        os.link(temporary, path)  # only if no other process made the store meanwhile (never replaces one)
    except FileExistsError:
        pass
    finally:
        os.remove(temporary)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
