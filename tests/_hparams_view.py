"""What TensorBoard's HParams dashboard shows for a logdir, read two ways:

- :func:`plugin_view`: the HParams plugin's own handlers (``get_experiment``, ``list_session_groups``)
  over TensorBoard's data provider on the logdir, in this process;
- :func:`served_view`: a real ``tensorboard`` server on 127.0.0.1, queried at the plugin's HTTP API
  (``/data/plugin/hparams/experiment`` and ``/data/plugin/hparams/session_groups``).

Both give the responses as the server sends them (JSON), reduced by :func:`sessions` and
:func:`columns` to what the dashboard's table shows::

    experiment, groups = plugin_view(logdir)
    (session,) = sessions(groups)   # hparams, status, metric values by (group, tag)
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

from _tb import tensorboard
from google.protobuf import json_format
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups

__all__ = ["SESSION_GROUPS_REQUEST", "Session", "columns", "plugin_view", "served_view", "sessions"]

#: What the dashboard asks for: every status, the first 100 groups.
SESSION_GROUPS_REQUEST: dict[str, Any] = {
    "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
    "startIndex": 0,
    "sliceSize": 100,
}


class Session(NamedTuple):
    """One session as the dashboard's table shows it."""

    name: str
    group: str
    hparams: dict[str, Any]
    status: str
    #: (group, tag) -> (training step, value) at the end.
    metrics: dict[tuple[str, str], tuple[int, float]]


def _json(proto: Any) -> Any:
    return json.loads(json_format.MessageToJson(proto))


def plugin_view(logdir: Path) -> tuple[Any, Any]:
    """The experiment and the session groups, from the HParams plugin's handlers on ``logdir``."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    backend = backend_context.Context(base_plugin.TBContext(data_provider=provider, logdir=str(logdir)))
    request_context = tb_context.RequestContext()
    experiment = get_experiment.Handler(request_context, backend, "", api_pb2.GetExperimentRequest()).run()
    request = json_format.ParseDict(SESSION_GROUPS_REQUEST, api_pb2.ListSessionGroupsRequest())
    groups = list_session_groups.Handler(request_context, backend, "", request).run()
    return _json(experiment), _json(groups)


def _get(port: int, path: str, request: dict[str, Any]) -> Any:
    url = f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode({'request': json.dumps(request)})}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def served_view(logdir: Path, flags: list[str], *, ready: int, timeout: float = 120.0) -> tuple[Any, Any, str]:
    """The experiment and the session groups from a real tensorboard server on ``logdir``, once it
    shows ``ready`` sessions that have ended (or ``timeout`` passes); and the server's log."""
    experiment: Any = None
    groups: Any = None
    with tensorboard(logdir, ["--reload_interval", "1", *flags]) as server:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and server.proc.poll() is None:
            try:
                experiment = _get(server.port, "/data/plugin/hparams/experiment", {})
                groups = _get(server.port, "/data/plugin/hparams/session_groups", SESSION_GROUPS_REQUEST)
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
                continue
            if len([s for s in sessions(groups) if s.status != "STATUS_UNKNOWN"]) >= ready:
                break
            time.sleep(0.5)
        return experiment, groups, server.log.read_text()


def sessions(groups: Any) -> list[Session]:
    """Every session of a ``session_groups`` response, sorted by name."""
    found = []
    for group in (groups or {}).get("sessionGroups", []):
        for session in group.get("sessions", []):
            metrics = {
                (m["name"].get("group", ""), m["name"]["tag"]): (
                    int(m.get("trainingStep", 0)),
                    float(m.get("value", 0.0)),
                )
                for m in session.get("metricValues", [])
            }
            status = session.get("status", "STATUS_UNKNOWN")
            found.append(Session(session["name"], group["name"], group.get("hparams", {}), status, metrics))
    return sorted(found, key=lambda s: s.name)


def columns(experiment: Any) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """An experiment's hyper-parameter columns (name -> type) and metric columns (group, tag)."""
    hparams = {h["name"]: h.get("type") for h in (experiment or {}).get("hparamInfos", [])}
    metrics = sorted((m["name"].get("group", ""), m["name"]["tag"]) for m in (experiment or {}).get("metricInfos", []))
    return hparams, metrics
