"""The dashboard fits the terminal it is in: a real pty at 80x24 and 120x40, read with pyte.

Names and numbers are never cut (only the sparkline gives way), the footer says each thing
once and only what is current, the final frame is drawn once, and header and footer agree on
the step — while running, after the end, and after a Ctrl-C typed at the terminal.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from _pty import run_in_pty

from hookbus.sinks.console._render import format_value

SIZES = [(80, 24), (120, 40)]

_SCRIPT = """
import sys, time
sys.modules["tensorflow"] = None  # the dashboard needs no TensorFlow; importing it costs seconds
import hookbus
from hookbus.sinks import ConsoleSink, CSVSink, StopAtStepSink
from hookbus.testing import ScriptedPublisher

bus = hookbus.EventBus()
bus.attach(ConsoleSink(run_name="fits", refresh_per_second=20))
bus.attach(CSVSink({csv!r}, every_n_steps=5))
if {last}:
    bus.attach(StopAtStepSink(last_step={last}))
keys = ["loss", "accuracy", "learning_rate", "gradient_norm/global"]
pub = ScriptedPublisher(bus, keys)
evaluator = ScriptedPublisher(bus, ["loss"], mode="eval")
values = lambda s: {{"loss": 1.0 / s, "accuracy": min(1.0, s / 150), "learning_rate": 1e-5 / s,
                    "gradient_norm/global": 12345.678 + s}}
with bus:
    pub.begin()
    pub.session(0)
    while not pub.advance(values):
        if pub.step % 100 == 0:
            evaluator.session(pub.step, restored=True)
            evaluator.evaluate({{"loss": 2.0 / pub.step}})
        time.sleep(0.01)
    pub.end(values)
print("after the run")
"""


def _script(tmp_path: Path, last: int) -> list[str]:
    path = tmp_path / "fits.py"
    path.write_text(textwrap.dedent(_SCRIPT.format(last=last, csv=str(tmp_path / "m.csv"))))
    return [sys.executable, str(path)]


def _whole_frame(text: str) -> bool:
    return "╭─ fits" in text and "sinks:" in text and "╰" in text.split("sinks:")[-1]


def _header_step(lines: list[str]) -> int:
    header = next(line for line in lines if " step " in line and "steps/s" in line)
    return int(header.split(" step ")[1].split()[0].split("/")[0].replace(",", ""))


def _rows(lines: list[str]) -> dict[str, list[str]]:
    """Metric rows of the dashboard by key: the cells between the panel's borders."""
    rows = {}
    for line in lines:
        cells = line.strip("│ ").split()
        if cells and cells[0] in ("loss", "accuracy", "learning_rate", "gradient_norm/global", "eval/loss"):
            rows[cells[0]] = cells
    return rows


def _check_fits(lines: list[str], cols: int) -> None:
    text = "\n".join(lines)
    assert "…" not in text  # rich's ellipsis: nothing cut
    assert all(len(line) <= cols for line in lines)
    rows = _rows(lines)
    assert set(rows) >= {"loss", "accuracy", "learning_rate", "gradient_norm/global"}, text
    for key, cells in rows.items():
        # metric, last, best, goal, at step, then the sparkline: every number whole.
        assert cells[3] in ("min", "max"), (key, cells)
        float(cells[1]), float(cells[2])  # noqa: B018 - parse: a cut number would not
        int(cells[4].replace(",", ""))


@pytest.mark.subprocess
@pytest.mark.parametrize(("cols", "rows"), SIZES)
def test_the_dashboard_fits_the_terminal_while_running_and_after_the_end(tmp_path: Path, cols: int, rows: int) -> None:
    result = run_in_pty(
        _script(tmp_path, 400),
        cols=cols,
        rows=rows,
        timeout=120,
        moments={
            "early": lambda t: _whole_frame(t) and "gradient_norm/global" in t,
            "history full": lambda t: _whole_frame(t) and "evaluation at step 200" in t,
            "late": lambda t: _whole_frame(t) and "evaluation at step 300" in t,
        },
    )
    assert result.returncode == 0, result.text
    assert result.cursor_visible
    assert set(result.moments) == {"early", "history full", "late"}, result.text
    for lines in result.moments.values():
        _check_fits(lines, cols)
    sparks = {}
    for name in ("history full", "late"):
        cells = _rows(result.moments[name])["gradient_norm/global"]
        sparks[name] = cells[5] if len(cells) > 5 else ""
    # The history (40 values) is full: at 120 columns the sparkline shows all of it, at 80 it
    # gives way to the numbers.
    if cols >= 120:
        assert len(sparks["late"]) == 40
    else:
        assert 4 <= len(sparks["late"]) < 40
    # While running: what the footer says is current, each thing once.
    running = "\n".join(result.moments["late"])
    assert "StopAtStepSink" not in running  # its target is the header's total
    assert running.count("sinks: ") == 1
    # After the end: one final frame, header and footer on the same step, the stop said once.
    final = result.lines
    text = result.text
    _check_fits(final, cols)
    assert text.count("╭─ fits") == 1
    assert "(finished)" in text
    assert _header_step(final) == 400
    assert text.count("stop at step 400: reached step 400") == 1
    assert "stop at step 400 (" not in text  # the stop-at-step target is not repeated after the stop
    rows_now = _rows(final)
    assert rows_now["loss"][1] == format_value(1.0 / 400)
    assert rows_now["gradient_norm/global"][1] == format_value(12345.678 + 400)
    assert rows_now["learning_rate"][1] == format_value(1e-5 / 400)
    assert "sinks: 3 ok" in text
    assert "after the run" in result.lines


@pytest.mark.subprocess
@pytest.mark.parametrize(("cols", "rows"), SIZES)
def test_after_a_typed_ctrl_c_the_final_frame_is_drawn_once_and_agrees_with_itself(
    tmp_path: Path, cols: int, rows: int
) -> None:
    # Ctrl-C typed at the terminal: the line discipline sends SIGINT and would echo "^C" where
    # the dashboard keeps its cursor, shifting every later frame a line down under a stale top
    # border. The first Ctrl-C is a graceful stop; the program then ends interrupted.
    result = run_in_pty(
        _script(tmp_path, 0),
        cols=cols,
        rows=rows,
        timeout=120,
        ctrl_c_when=lambda t: _whole_frame(t) and "evaluation at step 200" in t,
    )
    assert result.interrupted
    assert result.returncode != 0
    assert result.cursor_visible
    text, lines = "\n".join(result.scrolled), result.scrolled  # a traceback may scroll the frame up
    assert text.count("╭─ fits") == 1, text
    assert text.count("╰─") == 1, text
    assert "(stopped)" in text
    _check_fits(lines, cols)
    stop = next(line for line in lines if "stop at step" in line)
    stopped_at = int(stop.split("stop at step ")[1].split(":")[0].replace(",", ""))
    assert _header_step(lines) == stopped_at >= 200
    assert text.count("received SIGINT") == 1
    assert "KeyboardInterrupt: stopped gracefully after Ctrl-C" in text
    assert "after the run" not in text


@pytest.mark.subprocess
def test_a_dashboard_in_a_background_job_leaves_the_terminal_alone(tmp_path: Path) -> None:
    # `python train.py &` in an interactive shell: the job is not the terminal's foreground
    # process group, and changing the terminal's modes from there would stop it (SIGTTOU).
    script = " ".join(_script(tmp_path, 100))
    result = run_in_pty(
        ["bash", "-c", f"set -m; {script} & wait $!; echo background job exited $?"],
        cols=100,
        rows=40,
        timeout=60,
        own_terminal=True,
    )
    text = "\n".join(result.scrolled)
    assert "background job exited 0" in text, text
    assert "step 100/100" in text
