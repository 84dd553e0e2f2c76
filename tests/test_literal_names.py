"""Names shown literally: the dashboard never parses a metric name, a stop reason, an error or a
sink name as rich markup (bracketed names once collapsed into one row or replaced the dashboard
with a MarkupError)."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import pytest
from _pty import _CLEARED, run_in_pty
from rich.console import Console

import hookbus
from hookbus.sinks import ConsoleSink
from hookbus.testing import FakeClock, ScriptedPublisher

#: Names that rich would read as markup: a style tag, a closing tag, an escape, a link.
BRACKETED = ["loss[train]", "[bold]x", "acc[/]", "[red]", "\\[dim]y", "[link=http://x]z[/link]"]


@pytest.fixture(autouse=True)
def _plain_terminal_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")


class _Broken(hookbus.sink_api.Sink):
    def on_after_run(self, event: hookbus.Event) -> None:
        raise ValueError("[/]bad [bold]value")


class _StopAt(hookbus.sink_api.Sink):
    def __init__(self, last: int) -> None:
        super().__init__(every_n_steps=1, name="[i]stopper")
        self.last = last

    def on_after_run(self, event: hookbus.Event) -> None:
        if event.step >= self.last:
            event.request_stop("[bold]enough[/] at [red]")


def _run(sink: ConsoleSink, clock: FakeClock | None = None) -> None:
    bus = hookbus.EventBus(clock=clock) if clock is not None else hookbus.EventBus()
    bus.attach(sink)
    bus.attach(_StopAt(3))
    bus.attach(_Broken(name="[blink]broken[/]"))
    pub = ScriptedPublisher(bus, BRACKETED)
    with bus:
        pub.run([{k: float(i + 1) for i, k in enumerate(BRACKETED)}] * 5)


def _rows(lines: list[str]) -> dict[str, list[str]]:
    """The metric table's rows by their first cell, as drawn inside the panel's border."""
    found = {}
    for line in lines:
        cells = line.strip("│ ").split()
        if line.startswith("│ ") and len(cells) >= 4 and cells[0] in BRACKETED:
            found[cells[0]] = cells
    return found


def test_bracketed_names_each_get_their_own_literal_row_in_the_live_dashboard() -> None:
    clock = FakeClock(1000.0)
    console = Console(file=io.StringIO(), width=140, record=True, color_system=None)
    sink = ConsoleSink(console, run_name="[b]run[/b]", clock=clock, live=False, every_n_steps=1)
    _run(sink, clock)
    drawn = Console(file=io.StringIO(), width=140, record=True, color_system=None)
    drawn.print(sink.renderable())
    text = drawn.export_text()
    assert "could not be drawn" not in text
    rows = _rows(text.splitlines())
    assert sorted(rows) == sorted(BRACKETED)
    assert [rows[k][1] for k in BRACKETED] == [str(i + 1) for i in range(len(BRACKETED))]
    assert "[b]run[/b]" in text
    assert "stop at step 3: [bold]enough[/] at [red] ([i]stopper)" in text
    assert "errors: [blink]broken[/] ×3" in text


def test_bracketed_names_are_printed_literally_in_plain_mode() -> None:
    clock = FakeClock(1000.0)
    console = Console(file=io.StringIO(), width=400, color_system=None)
    sink = ConsoleSink(console, run_name="[b]run[/b]", clock=clock, live=False, every_n_steps=1)
    _run(sink, clock)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    line = next(ln for ln in out.splitlines() if ln.startswith("step 1 |"))
    assert line.startswith("step 1 | " + " | ".join(f"{k} {i + 1}" for i, k in enumerate(BRACKETED)))
    for key in BRACKETED:
        assert f"  {key}: last " in out
    assert "[b]run[/b]: finished at step 3" in out
    assert "stop at step 3: [bold]enough[/] at [red] ([i]stopper)" in out


_SCRIPT = """
import sys
sys.modules["tensorflow"] = None  # the dashboard needs no TensorFlow
sys.path.insert(0, {tests!r})
from test_literal_names import BRACKETED, _run
from hookbus.sinks import ConsoleSink

_run(ConsoleSink(run_name="[b]run[/b]", refresh_per_second=20, every_n_steps=1))
print("after the run")
"""


@pytest.mark.subprocess
def test_bracketed_names_in_a_real_terminal(tmp_path: Path) -> None:
    script = tmp_path / "names.py"
    script.write_text(textwrap.dedent(_SCRIPT.format(tests=str(Path(__file__).parent))))
    result = run_in_pty([sys.executable, str(script)], cols=120, rows=40, timeout=60)
    text = result.text
    assert result.returncode == 0, text
    assert "could not be drawn" not in text
    rows = _rows(result.lines)
    assert sorted(rows) == sorted(BRACKETED), text
    assert [rows[k][1] for k in BRACKETED] == [str(i + 1) for i in range(len(BRACKETED))]
    assert "╭─ [b]run[/b]" in text
    assert "[bold]enough[/] at [red]" in text
    assert "[blink]broken[/]" in text
    assert "after the run" in result.lines
