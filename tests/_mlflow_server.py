"""A real ``mlflow server`` for the tests: 127.0.0.1, a free port, a SQLite store in a test directory.

Shared by the MLflow sink's end-to-end tests and the reliability suite::

    with MlflowServer(tmp_path / "mlflow") as server:
        client = server.client()            # mlflow.MlflowClient on server.uri
        ...
        server.stop()                       # the server goes down mid-run (same port, same store)
        server.start()                      # and comes back

The server runs in its own process group (``mlflow server`` spawns uvicorn, and with job
execution on, huey consumers): stopping it signals the whole group, so no worker outlives a test.
Job execution is off (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``): the tracking API needs none
of it, and its seven consumer processes triple the start-up time. Without MLflow installed the
fixture that builds one skips (:func:`require_mlflow`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = ["MlflowServer", "free_port", "metric_history", "require_mlflow"]

#: How long a start may take before the test fails with the server's log (a loaded CI machine
#: takes ~7 s; ~20 s with job execution on).
START_DEADLINE = 120.0
#: How long the group has to exit after SIGTERM before it is killed.
STOP_GRACE = 10.0


def require_mlflow() -> ModuleType:
    """``mlflow``, or skip the test saying it is not installed (``pip install 'hookbus[mlflow]'``)."""
    mlflow: ModuleType = pytest.importorskip("mlflow", reason="needs MLflow: pip install 'hookbus[mlflow]'")
    return mlflow


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice for a bind to port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


class MlflowServer:
    """One ``mlflow server`` process group over a SQLite store in ``root``.

    Args:
        root: Its directory: ``mlflow.db`` (the store), ``artifacts/`` and ``server.log``.
        port: The port (default: a free one, kept across :meth:`stop` and :meth:`start`).
    """

    def __init__(self, root: Path, port: int | None = None) -> None:
        require_mlflow()
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.log = root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        """The tracking URI clients use (``http://127.0.0.1:PORT``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def store_uri(self) -> str:
        """The SQLite store behind it (readable with the server down)."""
        return f"sqlite:///{self.root / 'mlflow.db'}"

    def client(self) -> MlflowClient:
        """An ``MlflowClient`` on this server."""
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.uri)

    def start(self, deadline: float = START_DEADLINE) -> None:
        """Start the server and wait until ``/health`` answers; fails with its log past ``deadline``."""
        if self.process is not None:
            raise RuntimeError(f"the MLflow server on port {self.port} is already running")
        argv = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port)]
        argv += ["--workers", "1", "--backend-store-uri", self.store_uri]
        argv += ["--artifacts-destination", str(self.root / "artifacts")]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.root, start_new_session=True
            )
        until = time.monotonic() + deadline
        while not _healthy(self.port):
            if self.process.poll() is not None or time.monotonic() > until:
                status = self.process.poll()
                self.stop()
                tail = self.log.read_text(errors="replace")[-3000:]
                why = f"exited with status {status}" if status is not None else f"not healthy after {deadline:.0f} s"
                raise RuntimeError(f"mlflow server on port {self.port} {why}; its log ends:\n{tail}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the whole process group (SIGTERM, then SIGKILL after a grace period); idempotent."""
        if self.process is None:
            return
        process, self.process = self.process, None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_GRACE)
        with contextlib.suppress(ProcessLookupError):  # what is left of the group (a worker slower than its parent)
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def __enter__(self) -> MlflowServer:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def metric_history(client: Any, run_id: str, key: str) -> list[tuple[int, float, int]]:
    """``(step, value, timestamp_ms)`` of one metric of one run, in the order MLflow returns them."""
    return [(m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, key)]
