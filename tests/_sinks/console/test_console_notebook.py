"""The dashboard in a Jupyter notebook: a real notebook executed by nbclient on an IPython kernel
started from this Python, its saved outputs read back.

In a notebook the dashboard is one output, updated in place while the run goes on, and the
saved notebook holds the frame the run ended with (rich's ``Live`` there keeps an earlier frame
in an ipywidgets widget and writes an empty ``<pre></pre>`` at its end).
"""

from __future__ import annotations

import html
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from hookbus.sinks.console._render import format_value  # noqa: E402

_CELL = """
import sys, time
sys.modules["tensorflow"] = None  # the dashboard needs no TensorFlow; importing it costs seconds
import hookbus
from hookbus.sinks import ConsoleSink, StopAtStepSink
from hookbus.testing import ScriptedPublisher

bus = hookbus.EventBus()
console = bus.attach(ConsoleSink(run_name="notebook", refresh_per_second=20, live={live}))
bus.attach(StopAtStepSink(last_step=264))
pub = ScriptedPublisher(bus, ["loss", "accuracy"])
values = lambda s: {"loss": 1.0 / s, "accuracy": s / 264}
with bus:
    pub.begin()
    pub.session(0)
    while not pub.advance(values):
        if pub.step == 100:
            print("shown live:", console.is_live)
            # Let the refresh thread draw a few frames now (a wait, not a measurement).
            shown = getattr(console.display, "notebook", None)
            drawn = shown.frames if shown is not None else 0
            deadline = time.monotonic() + 60
            while shown is not None and shown.frames < drawn + 3 and time.monotonic() < deadline:
                time.sleep(0.01)
    pub.end(values)
"""


class _Recording(nbclient.NotebookClient):  # type: ignore[misc,name-defined]  # nbclient ships no types
    """Keeps every ``update_display_data`` message the kernel sent (the in-place updates)."""

    updates: list[dict[str, Any]]

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        if msg["msg_type"] == "update_display_data":
            self.updates.append(msg["content"])
        return super().process_message(msg, cell, cell_index)


def _kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec running this Python (the venv's, importing this tree's hookbus), found through
    a private JUPYTER_PATH; IPython's and Jupyter's own files go to ``tmp_path`` too."""
    spec = tmp_path / "jupyter" / "kernels" / "hookbus-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.joinpath("kernel.json").write_text(json.dumps({"argv": argv, "display_name": "hookbus", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core's platformdirs notice
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    for name in ("TTY_INTERACTIVE", "FORCE_COLOR", "NO_COLOR", "JUPYTER_COLUMNS", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    return "hookbus-test"


def _header_step(text: str) -> int:
    header = next(line for line in text.splitlines() if " step " in line and "steps/s" in line)
    return int(header.split(" step ")[1].split()[0].split("/")[0].replace(",", ""))


def _rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = line.strip("│ ").split()
        if cells and cells[0] in ("loss", "accuracy"):
            rows[cells[0]] = cells
    return rows


@pytest.mark.subprocess
@pytest.mark.parametrize("live", [None, True])  # the default in a notebook, and live asked for
def test_in_a_notebook_the_dashboard_updates_one_output_in_place_and_keeps_the_final_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live: bool | None
) -> None:
    cell = textwrap.dedent(_CELL).replace("{live}", repr(live))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    client = _Recording(notebook, kernel_name=_kernel(tmp_path, monkeypatch), timeout=120)
    client.updates = []
    client.execute()
    outputs = notebook.cells[0].outputs
    frames = [o for o in outputs if o.output_type in ("display_data", "execute_result")]
    assert len(frames) == 1, outputs  # one frame, no empty one after it
    printed = "".join(o.text for o in outputs if o.output_type == "stream" and o.name == "stdout")
    assert printed == "shown live: True\n", outputs  # live by default, and prints stay the cell's outputs
    final = frames[0].data["text/plain"]
    assert "<pre></pre>" not in frames[0].data["text/html"]
    shown_html = html.unescape(re.sub(r"<[^>]*>", "", frames[0].data["text/html"]))
    assert shown_html.strip() == final.strip()  # what a browser shows is the text
    # The saved frame is the one the run ended with: the last step, its values, stopped.
    assert "train (finished)   step 264/264" in final, final
    assert "stop at step 264: reached step 264" in final
    rows = _rows(final)
    assert rows["loss"][1] == format_value(1.0 / 264)
    assert rows["accuracy"][1] == format_value(1.0)
    # In place: the one output was updated while the run went on (a frame of a step before the
    # end, drawn while the cell waited at step 100), and the last update is the final frame.
    texts = [u["data"]["text/plain"] for u in client.updates]
    assert len({u["transient"]["display_id"] for u in client.updates}) == 1
    running = [_header_step(t) for t in texts if "train   step" in t]
    assert running, texts
    assert 0 < min(running) <= 100, [t.splitlines()[1] for t in texts]
    assert texts[-1] == final


def test_a_notebook_output_that_stops_answering_does_not_hang_the_close(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A kernel that never takes a frame (``update`` blocks) costs the close its deadline, no more."""
    import threading

    from rich.text import Text

    from hookbus.sinks.console import _notebook as _console_notebook

    release = threading.Event()
    entered = threading.Event()

    class Stuck:
        def update(self, bundle: dict[str, str], raw: bool) -> None:
            entered.set()
            release.wait()

    monkeypatch.setattr(_console_notebook, "STOP_DEADLINE", 0.2)
    display = _console_notebook.NotebookDisplay(40, 20.0, lambda: Text("frame"))
    display._handle = Stuck()
    display._thread = threading.Thread(target=display._run, daemon=True)
    display._thread.start()
    try:
        assert entered.wait(10)
        with caplog.at_level("WARNING", logger="hookbus"):
            display.stop()  # before: joined the refresh thread for ever
        assert "did not take a frame within" in caplog.text
        display.stop()  # idempotent
    finally:
        release.set()
