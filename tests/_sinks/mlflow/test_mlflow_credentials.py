"""A URI's credentials never show, and a close against a dead server keeps its deadline (issue 36 item 2).

With ``tracking_uri="http://alice:TOKEN@127.0.0.1:PORT"`` the token appeared in log lines and
``bus.stats()`` (the writer's target was the URI as given, and MLflow's errors quote it). Here the
server is down for the first steps (so every report that shows the URI is made), then a real
``mlflow server`` starts and the run ships; the token is in no log record, no stats, no dashboard
output, no event-log line and no tag or param of the run, while the redacted URI is shown.
"""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path

import pytest
from _mlflow_server import MlflowServer, free_port, metric_history, require_mlflow

require_mlflow()

from rich.console import Console  # noqa: E402

import hookbus  # noqa: E402 - after the skip without MLflow
from hookbus.sinks import ConsoleSink, EventLogSink, MLflowSink  # noqa: E402
from hookbus.testing import ScriptedPublisher  # noqa: E402

TOKEN = "tok3n-Sup3rSecret"


def _until_reported(bus: hookbus.EventBus) -> str:
    until = time.monotonic() + 30
    while time.monotonic() < until:
        writer = bus.stats()["MLflowSink"].writer
        if writer is not None and writer.unreachable is not None:
            return writer.unreachable
        time.sleep(0.05)
    raise AssertionError(f"never reported unreachable: {bus.stats()}")


def test_credentials_in_the_uri_never_show_in_messages_stats_dashboard_event_log_or_tags(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    server = MlflowServer(tmp_path / "mlflow")
    uri = f"http://alice:{TOKEN}@127.0.0.1:{server.port}"
    shown = f"http://***@127.0.0.1:{server.port}"
    screen = io.StringIO()
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(Console(file=screen, width=1000), live=False, plain_every_n_secs=0))
    bus.attach(EventLogSink(tmp_path / "events.jsonl"))
    sink = bus.attach(MLflowSink(uri, experiment="secret", directory=tmp_path / "tracker", every_n_steps=1))
    train = ScriptedPublisher(bus, ["loss"])
    evaluate = ScriptedPublisher(bus, ["loss"], mode="eval")
    seen: list[str] = []
    try:
        with bus:
            train.begin()
            evaluate.begin()
            train.session(0)
            for step in range(1, 21):
                train.advance({"loss": 1.0 / step})
                if step == 5:
                    seen.append(_until_reported(bus))
                    seen.append(repr(bus.stats()))
                    seen.append(str(sink.status()))
                    evaluate.evaluate({"loss": 0.5}, step=5)  # the event log records the sinks' status lines
                if step == 10:
                    server.start()
            train.end()
        client = server.client()
        experiment = client.get_experiment_by_name("secret")
        assert experiment is not None
        (run,) = client.search_runs([experiment.experiment_id])
        assert [s for s, _, _ in metric_history(client, run.info.run_id, "loss")] == list(range(1, 21))
    finally:
        server.stop()
    assert seen[0].startswith(f"MLflowSink: {shown} unreachable (ConnectionError: "), seen[0]
    assert shown in caplog.text
    events = (tmp_path / "events.jsonl").read_text()
    assert shown in events  # the status line, recorded
    output = capfd.readouterr()
    texts = {
        "log": caplog.text,
        "stdout": output.out,  # MLflow's own "View run ... at: <URI>" line
        "stderr": output.err,
        "stats then": "\n".join(seen),
        "stats after": repr(bus.stats()),
        "dashboard": screen.getvalue(),
        "event log": events,
        "tags": repr(run.data.tags),
        "params": repr(run.data.params),
        "writer target": repr(sink.output.stats()),
    }
    for where, text in texts.items():
        assert TOKEN not in text, where
        assert f"alice:{TOKEN}" not in text, where


def test_a_close_against_a_dead_server_returns_within_its_deadline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    bus = hookbus.EventBus()
    sink = bus.attach(MLflowSink(uri, directory=tmp_path, every_n_steps=1, close_deadline=2.0))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 21):
            pub.advance({"loss": float(step)})
        pub.end()
        began = time.monotonic()
    closed = time.monotonic() - began
    print(f"close against a dead server: {closed:.2f} s (close_deadline 2.0)")
    assert closed < 2.0 + 1.5, closed
    assert f"{uri} unreachable (ConnectionError: " in caplog.text
    assert "20 points and the run's end wait in the spool" in caplog.text
    stats = bus.stats()[sink.name].writer
    assert stats is not None
    assert stats.written == 20
    (segment,) = tmp_path.glob("mlflow-*.spool-*.jsonl")
    assert segment.read_text().count('"point"') == 20
