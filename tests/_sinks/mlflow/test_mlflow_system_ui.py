"""MLflow's own UI shows the sink's samples in its System metrics tab (issue 48), read in headless
Chromium from a real ``mlflow server``: the tab lists the run's ``system/`` metrics.

Skipped where ``/usr/bin/chromium`` is absent (Debian: ``apt-get install chromium``; ``.ci/run``
installs it in the background).
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest
from _mlflow_server import MlflowServer, require_mlflow

require_mlflow()

import hookbus  # noqa: E402 - after the skip without MLflow
from hookbus.sink_api import Event  # noqa: E402
from hookbus.sinks import MLflowSink  # noqa: E402
from hookbus.testing import ScriptedPublisher  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
#: Where the closing note's screenshot goes, when this variable names a file.
SCREENSHOT = os.environ.get("HOOKBUS_UI_SCREENSHOT")
NAMES = ("system/cpu_utilization_percentage", "system/system_memory_usage_megabytes")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs headless Chromium at /usr/bin/chromium (Debian: apt-get install chromium)"
)


def chromium(profile: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        *arguments,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)


def test_mlflows_system_metrics_tab_shows_the_samples(tmp_path: Path) -> None:
    with MlflowServer(tmp_path / "server") as server:
        bus = hookbus.EventBus(system_metrics=False)  # the samples are the test's own
        sink = bus.attach(
            MLflowSink(server.uri, experiment="ui", directory=tmp_path / "d", every_n_steps=1, system=True)
        )
        pub = ScriptedPublisher(bus, ["loss"])
        with bus:
            pub.begin()
            pub.session(0)
            for step in range(1, 6):
                pub.advance({"loss": 1.0 / step})
                values = {NAMES[0]: 10.0 * step, NAMES[1]: 500.0 + step}
                sample = Event("system", step, mode="system", values=values, wall_time=1_700_000_000.0 + step)
                thread = threading.Thread(target=sink.on_system, args=(sample,))
                thread.start()
                thread.join()
            pub.end()
        client = server.client()
        experiment = client.get_experiment_by_name("ui")
        assert experiment is not None
        (run,) = client.search_runs([experiment.experiment_id])
        page = f"{server.uri}/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}/system-metrics"
        budget = "--virtual-time-budget=30000"
        # Virtual time does not wait for the server's answers: a page read before the charts
        # arrived (a loaded machine, MLflow's scripts fetched the first time) is read again, a few
        # times at most, in the same profile (its cache holds the scripts by then).
        text = ""
        for _ in range(6):
            dom = chromium(tmp_path / "profile", budget, "--dump-dom", page)
            assert dom.returncode == 0, dom.stderr[-2000:]
            text = dom.stdout
            if all(f'title="{name}"' in text for name in NAMES):
                break
        assert "System metrics" in text, text[-3000:]
        for name in NAMES:  # each a chart of the tab, titled with its name
            assert f'title="{name}"' in text, f"{name} not in the System metrics tab: {text[-3000:]}"
        if SCREENSHOT:
            shot = chromium(tmp_path / "profile", budget, "--window-size=1400,1000", f"--screenshot={SCREENSHOT}", page)
            assert shot.returncode == 0, shot.stderr[-2000:]
