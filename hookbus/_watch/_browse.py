"""The table of runs in a terminal, driven by keys: sort, filter, select, open a run, come back.

What the keys do (the table's last line says it, shortened to the width):

- ``↑`` ``↓`` (``k`` ``j``), ``PgUp`` ``PgDn``, ``Home`` ``End`` (``g`` ``G``): move the selection;
  the rows scroll with it when there are more than the screen holds.
- ``s`` / ``S``: sort by the next / previous column (run, state, step, rate, each metric shown by
  its best, each hyper-parameter that differs); ``r``: the other way round.
- ``f`` / ``F``: show only the runs in the next / previous state among those present, the worst
  first (then all again);
  ``/``: type a name filter (a glob, or any part of the name), ``Enter`` keeps it, ``Esc`` drops
  it; ``Esc``: clear both filters.
- ``Enter`` (``→``, ``o``): open the selected run in the single-run view; there ``Esc`` (``←``,
  ``Backspace``) comes back to the table.
- ``q``: quit, from either view (exit status 0).

The rows are read again every interval (a ``stat`` per quiet run); a key redraws at once from the
rows read last. While keys are read, the table stays up after every run has ended, until ``q``;
without a terminal to read them from, it ends with its runs as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from hookbus._watch._alerts import Alerter
from hookbus._watch._keys import BACKSPACE, DOWN, END, ENTER, ESCAPE, HOME, PAGE_DOWN, PAGE_UP, RIGHT, UP, Keys
from hookbus._watch._run import EXIT_STATUS, WAITING, WORST_FIRST
from hookbus._watch._sweep import (
    RunRow,
    Sweep,
    SweepOptions,
    check_sort,
    default_metrics,
    fitting_metrics,
    one_line_width,
    select,
    shared_hparams,
    table,
    worst,
)

__all__ = ["KEYS_HELP", "RUN_KEYS_HELP", "Browse", "OpenRun", "TableScreen", "browse", "sort_columns"]

#: The table's last line: its keys.
KEYS_HELP = "↑↓ select  enter open  s sort  r reverse  f state  / name  esc clear  q quit"
#: The single-run view's last line, opened from the table (after the run's name).
RUN_KEYS_HELP = "esc back to the table  q quit"
#: Opens a run (its directory) in the single-run view reading ``keys``; whether ``q`` was pressed there.
OpenRun = Callable[[Path, Keys], bool]
_ENDED = frozenset({"finished", "stopped", "crashed"})
_GLOB = frozenset("*?[")


def sort_columns(every: Sequence[RunRow], metrics: Sequence[str]) -> list[str]:
    """The columns ``s`` steps through: run, state, step, rate, the metrics shown, the
    hyper-parameters that differ."""
    _, differing = shared_hparams(every)
    return ["run", "state", "step", "rate", *metrics, *differing]


def _pattern(typed: str) -> str | None:
    """The glob a typed name filter means: itself when it has a wildcard, else any name holding it."""
    if not typed:
        return None
    return typed if _GLOB & set(typed) else f"*{typed}*"


@dataclass
class Browse:
    """What the table shows now and where its selection is; changed by :meth:`press`.

    Attributes:
        sort: The column sorted by (``None``: by name).
        reverse: Sorted the other way round.
        states: The states shown (all when empty).
        name: The glob a run's name must match (``None``: any).
        selected: The selected run's name.
        index: Its place among the rows shown (kept when the run is filtered out or gone).
        top: The first row on the screen.
        typing: The name filter as it is being typed (``None``: not typing).
    """

    sort: str | None = None
    reverse: bool = False
    states: tuple[str, ...] = ()
    name: str | None = None
    selected: str | None = None
    index: int = 0
    top: int = 0
    typing: str | None = None
    _before: str | None = field(default=None, repr=False)

    def shown(self, every: Sequence[RunRow]) -> list[RunRow]:
        """The rows shown: filtered and sorted; the selection kept on its run where it can be."""
        rows = select(every, states=self.states, name=self.name, sort=self.sort, reverse=self.reverse)
        names = [row.name for row in rows]
        if self.selected in names:
            self.index = names.index(self.selected)
        self.index = max(0, min(self.index, len(rows) - 1))
        self.selected = rows[self.index].name if rows else None
        return rows

    def window(self, count: int, page: int) -> tuple[int, int]:
        """The rows on a screen of ``page`` rows, ``[first, last)``, moved to hold the selection."""
        page = max(page, 1)
        if self.index < self.top:
            self.top = self.index
        elif self.index >= self.top + page:
            self.top = self.index - page + 1
        self.top = max(0, min(self.top, count - page))
        return self.top, min(self.top + page, count)

    def press(self, key: str, every: Sequence[RunRow], metrics: Sequence[str], page: int) -> str | None:
        """Take one key; ``"open"`` or ``"quit"`` when it asks for that, else ``None``."""
        if self.typing is not None:
            self._type(key)
            return None
        rows = self.shown(every)
        moves = {UP: -1, "k": -1, DOWN: 1, "j": 1, PAGE_UP: -page, PAGE_DOWN: page}
        if key == "q":
            return "quit"
        if key in (ENTER, RIGHT, "o"):
            return "open" if rows else None
        if key in moves or key in (HOME, "g", END, "G"):
            last = len(rows) - 1
            to = 0 if key in (HOME, "g") else last if key in (END, "G") else self.index + moves[key]
            self.index = max(0, min(to, last))
            self.selected = rows[self.index].name if rows else None
        elif key in ("s", "S"):
            columns = sort_columns(every, metrics)
            at = columns.index(self.sort) if self.sort in columns else 0
            self.sort = columns[(at + (1 if key == "s" else -1)) % len(columns)]
        elif key == "r":
            self.reverse = not self.reverse
        elif key in ("f", "F"):
            present = {row.state for row in every}
            cycle: list[tuple[str, ...]] = [(), *((s,) for s in WORST_FIRST if s in present)]
            at = cycle.index(self.states) if self.states in cycle else 0
            self.states = cycle[(at + (1 if key == "f" else -1)) % len(cycle)]
        elif key == "/":
            self._before, self.typing = self.name, ""
        elif key == ESCAPE:
            self.states, self.name = (), None
        return None

    def _type(self, key: str) -> None:
        typing = self.typing or ""
        if key == ENTER:
            self.typing = None
            return
        if key == ESCAPE:
            self.name, self.typing = self._before, None
            return
        if key == BACKSPACE:
            typing = typing[:-1]
        elif len(key) == 1:
            typing += key
        self.typing = typing
        self.name = _pattern(typing)

    def status(self, shown: int, every: int, first: int, last: int, ended: bool) -> str:
        """The line under the table: the sort, the filters, which rows are on the screen."""
        parts = [f"sort: {self.sort or 'run'}{' (reversed)' if self.reverse else ''}"]
        if self.states:
            parts.append("state: " + ", ".join(self.states))
        if self.typing is not None:
            parts.append(f"name: {self.typing}_")
        elif self.name is not None:
            parts.append(f"name: {self.name}")
        if shown > last - first:
            parts.append(f"rows {first + 1}-{last} of {shown}")
        if ended:
            parts.append("all ended")
        return "  ·  ".join(parts)


class TableScreen:
    """The table of runs as a terminal of ``console``'s size shows it: the rows read last, the
    columns that fit, the window of rows on the screen, the status and keys lines.

    Args:
        sweep: The runs.
        options: What the command line asked for (the first sort and filters, the metrics named).
        console: The terminal (its width and height decide the columns and the rows shown).
        keys_line: Whether to draw the keys' line (keys are read).
        alerter: Looks at every row at each read (the alerts).
    """

    def __init__(
        self,
        sweep: Sweep,
        options: SweepOptions,
        console: Console,
        *,
        keys_line: bool,
        alerter: Alerter | None = None,
    ) -> None:
        self.sweep = sweep
        self.options = options
        self.console = console
        self.keys_line = keys_line
        self.alerter = alerter
        self.state = Browse(sort=options.sort, reverse=options.reverse, states=options.states, name=options.name)
        self.every: list[RunRow] = []
        self.metrics: list[str] = []
        self._fitted: dict[tuple[int, int], tuple[list[str], list[str], bool]] = {}

    def read(self) -> None:
        """Read every run's row again (a ``stat`` for each quiet run) and let the alerts look."""
        self.every = every = self.sweep.rows()
        sort = self.state.sort
        if sort is not None and sort == self.options.sort:  # the command line's, checked as --once does
            check_sort(sort, every)
        self.metrics = list(self.options.metrics) or fitting_metrics(default_metrics(every), every, self.console.width)
        if self.alerter is not None:
            self.alerter.observe(every)

    def press(self, key: str, page: int) -> str | None:
        """One key (see :meth:`Browse.press`)."""
        return self.state.press(key, self.every, self.metrics, page)

    def columns(self) -> tuple[list[str], list[str], bool]:
        """The metrics and differing hyper-parameters whose columns fit the width beside each
        other on every run's line (rich would squeeze every column, names and states included):
        the metrics after the first go first, then the hyper-parameters from the right; and
        whether the machine column fits beside those (where a run has a sample)."""
        every, width = self.every, self.console.width
        key = (id(every), width)
        if key not in self._fitted:
            self._fitted.clear()
            shown, hparams = list(self.metrics), shared_hparams(every)[1]
            while one_line_width(every, shown, hparams) > width and (len(shown) > 1 or hparams):
                if len(shown) > 1:
                    shown.pop()
                else:
                    hparams.pop()
            machine = any(row.cpu is not None for row in every)
            machine = machine and one_line_width(every, shown, hparams, machine=True) <= width
            self._fitted[key] = shown, hparams, machine
        return self._fitted[key]

    def frame(self, final: bool = False) -> tuple[RenderableType, int]:
        """The frame, and the rows a page holds; ``final``: the table alone, nothing marked."""
        state, every, console = self.state, self.every, self.console
        rows = state.shown(every)
        metrics, hparams, machine = self.columns()
        title = f"{len(rows)} of {len(every)} runs in {self.sweep.root}"
        bare = table([], every, metrics, title, one_line=True, hparams=hparams, machine=machine)
        overhead = len(console.render_lines(bare, console.options, pad=False)) + (0 if final else 2)
        page = max(console.height - overhead, 1)
        first, last = state.window(len(rows), page)
        selected = None if final else state.selected or ""
        shown = table(
            rows[first:last], every, metrics, title, selected=selected, one_line=True, hparams=hparams, machine=machine
        )
        if final:
            return shown, page
        status = state.status(len(rows), len(every), first, last, self.ended())
        hidden = [name for name in shared_hparams(every)[1] if name not in hparams]
        if hidden:  # a differing hyper-parameter is never dropped silently
            status += "  ·  too wide: " + ", ".join(hidden)
        lines = [status] + ([KEYS_HELP] if self.keys_line else [])
        return Group(shown, *(Text(line, no_wrap=True, overflow="ellipsis") for line in lines)), page

    def ended(self) -> bool:
        """Whether every run shown has ended (and one is shown)."""
        rows = self.state.shown(self.every)
        return bool(rows) and all(r.state in _ENDED for r in rows)

    def status(self) -> int:
        """The exit status of the worst state among the runs shown."""
        rows = self.state.shown(self.every)
        return EXIT_STATUS[worst(rows)] if rows else EXIT_STATUS[WAITING]


def browse(
    sweep: Sweep,
    options: SweepOptions,
    console: Console,
    *,
    keys: Keys,
    interval: float,
    keep_following: bool,
    open_run: OpenRun,
    alerter: Alerter | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """The live table on ``console``, driven by ``keys`` (see the module's docstring); the exit
    status: 0 after ``q``, else the worst state's when every run shown has ended (no keys read)."""
    screen = TableScreen(sweep, options, console, keys_line=keys.active, alerter=alerter)
    screen.read()
    status: int | None = None
    display = Live(console=console, auto_refresh=False, transient=False)
    display.start()
    try:
        due = clock() + interval
        while status is None:
            frame, page = screen.frame()
            display.update(frame, refresh=True)
            if not keys.active and not keep_following and screen.ended():
                break
            for key in keys.read(max(0.0, due - clock())):
                action = screen.press(key, page)
                if action == "quit":
                    status = 0
                    break
                selected = screen.state.selected
                if action == "open" and selected is not None:
                    display.stop()
                    console.clear()
                    try:
                        quit_ = open_run(sweep.root / selected, keys)
                    finally:
                        console.clear()
                        display = Live(console=console, auto_refresh=False, transient=False)
                        display.start()
                    if quit_:
                        status = 0
                        break
                    due = clock()  # back at the table: read what changed meanwhile
            if clock() >= due:
                screen.read()
                due = clock() + interval
    finally:
        display.update(screen.frame(final=True)[0], refresh=True)
        display.stop()
    return screen.status() if status is None else status
