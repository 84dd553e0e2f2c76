"""``hookbus watch DIR`` in a terminal, driven by keys (issue 49 item 2): sort, filter, select, open a run
into the single-run view and come back, quit; more runs than the screen holds scroll with the selection;
the terminal gets its own mode back however the watcher ends.

Each test runs the command in a real pty of 80x24 without colour, types keys into it and waits on
what the screen shows (never on a sleep). The runs are written by the real sinks (``EventLogSink``
and its summaries) from scripted trainings (tests/_watch/test_sweep.py's ``train``); the expected
order of the rows is read from the logs by the tests' own rule (tests/_summaries.py).
"""

from __future__ import annotations

import re
import sys
import termios
from pathlib import Path

import pytest
from _summaries import fold
from _watch_pty import PtySession

from .test_sweep import train

pytestmark = pytest.mark.subprocess

ARROW_DOWN, ARROW_UP, KEY_HOME, KEY_END, ESCAPE_KEY = "\x1b[B", "\x1b[A", "\x1b[H", "\x1b[F", "\x1b"
_ROW = re.compile(r"^ (>| ) (\S+) +(live|stale|presumed dead|waiting|finished|stopped|crashed) ", re.MULTILINE)


def rows(screen: str) -> list[str]:
    """The runs the table shows, top to bottom."""
    return [m[2] for m in _ROW.finditer(screen)]


def selected(screen: str) -> str | None:
    return next((m[2] for m in _ROW.finditer(screen) if m[1] == ">"), None)


def watch(root: Path, *args: str) -> PtySession:
    command = [sys.executable, "-m", "hookbus", "watch", str(root), "--interval", "0.2", *args]
    return PtySession(command, cols=80, rows=24, env={"NO_COLOR": "1"}, own_terminal=True)


def cbreak(modes: list[object]) -> bool:
    """Whether these terminal modes read keys one by one (no line editing, no echo)."""
    flags = modes[3]
    assert isinstance(flags, int)
    return not flags & (termios.ICANON | termios.ECHO)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five runs of a learning-rate sweep (each its own last step), one crashed, one stopped."""
    root = tmp_path_factory.mktemp("keys") / "runs"
    train(root / "lr-0.1", 0.1, last=30)
    train(root / "lr-0.3", 0.3, last=27, seed=1)
    train(root / "lr-1.0", 1.0, last=30, crash_at=23)
    train(root / "lr-3.0", 3.0, last=30, stop_at=18, seed=1)
    train(root / "lr-0.03", 0.03, last=24)
    return root


def best(root: Path, run: str, key: str) -> float:
    return float(fold(root / run / "events.jsonl")["best"][key][1])


def test_keys_sort_filter_open_a_run_come_back_and_quit(runs: Path) -> None:
    session = watch(runs)
    try:
        screen = session.wait_for(lambda text: "q quit" in text and len(rows(text)) == 5)
        assert rows(screen) == ["lr-0.03", "lr-0.1", "lr-0.3", "lr-1.0", "lr-3.0"]  # by name at first
        assert cbreak(session.modes())  # keys arrive one by one while it runs
        assert "shared: optimizer=sgd" in screen  # said once; lr and seed differ: columns

        session.type("s")  # the next column: state, the worst first
        screen = session.wait_for(lambda text: "sort: state" in text)
        assert rows(screen)[:2] == ["lr-1.0", "lr-3.0"]  # crashed, stopped, then the finished runs
        session.type("sss")  # step, rate, then the first metric: eval/loss by its best, best first
        screen = session.wait_for(lambda text: "sort: eval/loss" in text)
        expected = sorted(
            ["lr-0.03", "lr-0.1", "lr-0.3", "lr-1.0", "lr-3.0"], key=lambda run: best(runs, run, "eval/loss")
        )
        assert rows(screen) == expected
        session.type("r")
        screen = session.wait_for(lambda text: "sort: eval/loss (reversed)" in text)
        assert rows(screen) == expected[::-1]

        session.type("f")  # the first state present, the worst: crashed
        screen = session.wait_for(lambda text: "state: crashed" in text)
        assert rows(screen) == ["lr-1.0"]
        assert "1 of 5 runs" in screen
        session.type(ESCAPE_KEY)
        session.wait_for(lambda text: len(rows(text)) == 5)
        session.type("/0.3")  # any part of the name
        screen = session.wait_for(lambda text: "name: 0.3_" in text and len(rows(text)) == 1)
        assert rows(screen) == ["lr-0.3"]
        session.type("\r")  # kept
        screen = session.wait_for(lambda text: "name: *0.3*" in text)
        session.type(ESCAPE_KEY)
        screen = session.wait_for(lambda text: len(rows(text)) == 5 and "name:" not in text)

        session.type(KEY_HOME + ARROW_DOWN + ARROW_DOWN)  # the third row of the reversed order
        screen = session.wait_for(lambda text: selected(text) == expected[::-1][2])
        run = selected(screen)
        assert run is not None
        step = fold(runs / run / "events.jsonl")["step"]
        session.type("\r")  # open it: the single-run dashboard, at its own last step
        screen = session.wait_for(lambda text: f"{run}  ·  esc back" in text and f"step {step}" in text)
        assert "best eval/loss" not in screen  # the dashboard, not the table
        session.type(ESCAPE_KEY)  # back to the table, as it was left
        screen = session.wait_for(lambda text: "q quit" in text and len(rows(text)) == 5)
        assert selected(screen) == run
        assert rows(screen) == expected[::-1]

        session.type("q")
        status = session.finish()
        after = session.modes()  # read from the pty once the command has exited
    finally:
        session.close()
    assert status == 0
    assert after == session.modes_before  # the terminal's own mode, given back
    assert not cbreak(after)


def test_more_runs_than_the_screen_holds_scroll_with_the_selection(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for index in range(40):
        train(root / f"run-{index:02d}", round(0.1 + index / 100, 2), last=10 + index)
    session = watch(root)
    try:
        screen = session.wait_for(lambda text: "q quit" in text)  # the frame's last line: drawn whole
        shown = rows(screen)
        page = len(shown)
        assert shown == [f"run-{index:02d}" for index in range(page)]
        assert 5 < page < 24
        assert f"rows 1-{page} of 40" in screen
        assert screen.splitlines()[0].startswith("40 of 40 runs")  # the frame fits: nothing scrolled off the top
        session.type(KEY_END)
        # The status line is drawn after the rows: once it says so, the rows above are that frame's.
        screen = session.wait_for(lambda text: f"rows {41 - page}-40 of 40" in text)
        assert selected(screen) == "run-39"
        assert rows(screen) == [f"run-{index:02d}" for index in range(40 - page, 40)]
        session.type(ARROW_UP * (page + 2))  # up past the window's top: it scrolls up with it
        first = 39 - page - 2
        screen = session.wait_for(lambda text: f"rows {first + 1}-{first + page} of 40" in text)
        target = f"run-{first:02d}"
        assert selected(screen) == target
        assert rows(screen)[0] == target
        session.type("\r")  # the selected run, opened: its own last step
        session.wait_for(lambda text: f"{target}  ·  esc back" in text and f"step {10 + first}" in text)
        session.type("q")  # q quits from the run's view too
        status = session.finish()
        after = session.modes()  # read from the pty once the command has exited
    finally:
        session.close()
    assert status == 0
    assert after == session.modes_before


def test_ctrl_c_gives_the_terminal_its_mode_back(runs: Path) -> None:
    session = watch(runs)
    try:
        session.wait_for(lambda text: "q quit" in text)
        assert cbreak(session.modes())
        session.type("\x03")  # typed: the terminal sends SIGINT
        status = session.finish()
        after = session.modes()  # read from the pty once the command has exited
    finally:
        session.close()
    assert status == 130
    assert after == session.modes_before


def test_an_error_gives_the_terminal_its_mode_back(runs: Path, tmp_path: Path) -> None:
    """A run whose log is not an event log, opened: the watcher fails as ``hookbus watch`` on that
    file fails (status 2, the line that is wrong), with the terminal as it found it."""
    root = tmp_path / "runs"
    train(root / "a", 0.1)
    (root / "b").mkdir()
    (root / "b" / "notes.jsonl").write_text('{"hello": 1}\n')
    session = watch(root)
    try:
        session.wait_for(lambda text: rows(text) == ["a", "b"])
        session.type(ARROW_DOWN + "\r")
        status = session.finish()
        after = session.modes()  # read from the pty once the command has exited
    finally:
        session.close()
    assert status == 2
    assert "notes.jsonl line 1 is not an event log record" in session.text.replace("\n", "")
    assert after == session.modes_before


@pytest.mark.parametrize(
    ("typed", "keys"),
    [
        ("\x1b[A\x1b[B\x1bOB", ["up", "down", "down"]),
        ("\x1b[H\x1b[4~\x1b[6~", ["home", "end", "page down"]),
        ("q\r/\x1b", ["q", "enter", "/", "escape"]),
        ("\x1b[15~s", ["s"]),  # F5: a sequence no key here names, dropped whole
        ("é", ["é"]),
    ],
)
def test_what_a_terminal_sends_is_read_as_keys(typed: str, keys: list[str]) -> None:
    from hookbus._watch._keys import decode

    assert decode(typed) == keys


def test_the_table_state_follows_keys_through_edges(runs: Path) -> None:
    """Without a terminal: a filter that hides every run, a name typed then dropped, the state
    filter and the sort columns going round, a selection that stays on its run when re-sorted."""
    from hookbus._watch._browse import Browse, sort_columns
    from hookbus._watch._sweep import Sweep

    every = Sweep(runs).rows()
    metrics = ["eval/loss", "loss"]
    state = Browse()
    for key in "/zzz":
        state.press(key, every, metrics, page=10)
    assert state.shown(every) == []
    assert state.selected is None
    assert state.press("down", every, metrics, page=10) is None  # nothing to move to, nothing breaks
    assert state.press("enter", every, metrics, page=10) is None  # typing: Enter keeps the filter
    assert state.press("enter", every, metrics, page=10) is None  # nothing to open
    state.press("/", every, metrics, page=10)
    for key in ("0", ".", "3", "escape"):  # typed, then dropped: the filter before it comes back
        state.press(key, every, metrics, page=10)
    assert state.name == "*zzz*"
    state.press("escape", every, metrics, page=10)
    assert len(state.shown(every)) == 5

    seen = []
    for _ in range(4):  # crashed, stopped, finished, then all again
        state.press("f", every, metrics, page=10)
        seen.append(state.states)
    assert seen == [("crashed",), ("stopped",), ("finished",), ()]
    state.press("F", every, metrics, page=10)
    assert state.states == ("finished",)
    state.press("escape", every, metrics, page=10)

    columns = sort_columns(every, metrics)
    assert columns == ["run", "state", "step", "rate", "eval/loss", "loss", "lr", "seed"]
    state.press("S", every, metrics, page=10)  # backwards from run: round to the last column
    assert state.sort == "seed"
    for _ in range(3):  # round again: run, state, step
        state.press("s", every, metrics, page=10)
    assert state.sort == "step"
    state.press("end", every, metrics, page=10)
    last = state.selected
    state.press("r", every, metrics, page=10)
    assert state.shown(every)[0].name == last  # re-sorted, the selection kept on its run
    assert state.selected == last
    assert state.index == 0
