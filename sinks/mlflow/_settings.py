"""MLflow's client settings while an MLflowSink runs: its HTTP retries bounded, where the user set none.

MLflow's HTTP client reads its settings from the environment at every request, for the whole
process: a request to a server that is away is retried 7 times with backoff, each with a 120 s
timeout, so one call could take minutes. The sink's shipper retries by itself, so while a sink
runs, :func:`hold_settings` sets :data:`HTTP_BOUNDS` (and :data:`QUIET_URL` for a URI with
credentials) where the environment has no value of the user's; the last sink to close removes
what the sinks set (:func:`release_settings`). A user's own values are never changed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

__all__ = ["HTTP_BOUNDS", "QUIET_URL", "hold_settings", "release_settings"]

#: MLflow's HTTP client's bounds while a sink runs, where the user set none.
HTTP_BOUNDS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",  # the shipper retries, with its own pauses
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}
#: MLflow prints each ended run's URL with the tracking URI as given: not where it holds credentials.
QUIET_URL = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
_bounds_lock = threading.Lock()
_bounds_users: dict[str, int] = {}  # name -> sinks holding it
_bounds_set: dict[str, str] = {}  # name -> the value the sinks set


def hold_settings(settings: Mapping[str, str]) -> list[str]:
    """Set ``settings`` in the environment where the user set none; the names this sink holds."""
    held = []
    with _bounds_lock:
        for name, value in settings.items():
            if name in _bounds_set:
                _bounds_users[name] += 1
            elif name not in os.environ:
                os.environ[name] = _bounds_set[name] = value
                _bounds_users[name] = 1
            else:
                continue  # the user's own value
            held.append(name)
    return held


def release_settings(held: list[str]) -> None:
    """Let go of the settings :func:`hold_settings` returned; the last holder removes them."""
    with _bounds_lock:
        for name in held:
            _bounds_users[name] -= 1
            if _bounds_users[name] == 0:
                value = _bounds_set.pop(name)
                del _bounds_users[name]
                if os.environ.get(name) == value:
                    del os.environ[name]
