"""The console dashboard's picture: per-key trackers, immutable snapshots, how they are drawn.

The training thread builds a :class:`Snapshot`; rich's refresh thread draws it. Everything here
is a pure function of a snapshot (and the time of drawing), and :class:`Dashboard` catches any
error while drawing, because an exception inside a renderable silently ends rich's refresh
thread.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Group
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from hookbus._direction import better_direction

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

__all__ = [
    "Dashboard",
    "MetricRow",
    "MetricTracker",
    "Snapshot",
    "format_duration",
    "format_value",
    "goal_for_key",
    "plain_eval_line",
    "plain_line",
    "plain_summary",
    "sparkline",
]

_BLOCKS = "▁▂▃▄▅▆▇█"
_ASCII_BLOCKS = "_.-:=+*#"


@dataclass(frozen=True)
class MetricRow:
    """One scalar key as shown: last value, best so far and where, recent history."""

    key: str
    goal: str  # "min" or "max"
    last: float
    best: float | None
    best_step: int | None
    history: tuple[float, ...]


def goal_for_key(key: str) -> str:
    """The direction of "best" for ``key`` (:func:`hookbus._direction.better_direction`, the rule
    early stopping's ``mode="auto"`` uses); ``"min"`` for names the rule cannot decide."""
    return better_direction(key) or "min"


class MetricTracker:
    """The mutable record of one scalar key, kept by the training thread; ``row()`` freezes it.

    Memory is bounded: the history is a deque of at most ``history`` values.
    """

    __slots__ = ("best", "best_step", "goal", "history", "key", "last")

    def __init__(self, key: str, goal: str, history: int) -> None:
        self.key = key
        self.goal = goal
        self.last = math.nan
        self.best: float | None = None
        self.best_step: int | None = None
        self.history: deque[float] = deque(maxlen=history)

    def update(self, step: int, value: float) -> None:
        self.last = value
        self.history.append(value)
        if math.isfinite(value) and (
            self.best is None or (value < self.best if self.goal == "min" else value > self.best)
        ):
            self.best, self.best_step = value, step

    def row(self) -> MetricRow:
        return MetricRow(self.key, self.goal, self.last, self.best, self.best_step, tuple(self.history))


@dataclass(frozen=True)
class Snapshot:
    """Everything the dashboard shows at one moment; never mutated after it is made.

    ``elapsed`` and ``rate`` are measured at ``taken_at`` (the sink's clock); while ``running``,
    the drawing adds the time since then to ``elapsed``.
    """

    run_name: str
    mode: str = "train"
    phase: str = "starting"
    running: bool = True
    step: int = 0
    total: int | None = None
    rate: float | None = None
    elapsed: float = 0.0
    taken_at: float = 0.0
    train: tuple[MetricRow, ...] = ()
    evals: tuple[MetricRow, ...] = ()
    eval_step: int | None = None
    checkpoint: str | None = None
    stop: str | None = None
    errors: tuple[tuple[str, int], ...] = ()
    statuses: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def elapsed_at(self, now: float) -> float:
        """Elapsed seconds as of ``now`` (frozen once the run is over)."""
        return self.elapsed + max(0.0, now - self.taken_at) if self.running else self.elapsed

    @property
    def eta(self) -> float | None:
        """Seconds to ``total`` at the current rate, while running and if both are known."""
        if not self.running or self.total is None or not self.rate or self.rate <= 0:
            return None
        return max(0, self.total - self.step) / self.rate

    @property
    def status_items(self) -> tuple[str, ...]:
        """The status line's parts: checkpoint, stop, other sinks, errors, notes."""
        items: list[str] = []
        if self.checkpoint:
            items.append(self.checkpoint)
        if self.stop:
            items.append(self.stop)
        items.extend(self.statuses)
        if self.errors:
            items.append("errors: " + ", ".join(f"{name} ×{count}" for name, count in self.errors))
        items.extend(self.notes)
        return tuple(items)


def format_value(value: float | None) -> str:
    """Four significant digits; ``nan``/``inf`` as such; ``-`` for none."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-4):
        return f"{value:.3e}"
    return f"{value:.4g}"


def format_duration(seconds: float | None) -> str:
    """``H:MM:SS``; ``-`` for unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    whole = int(max(0.0, seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def format_rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1f}"


def sparkline(values: tuple[float, ...], *, ascii_only: bool = False) -> str:
    """One character per value, scaled between the finite minimum and maximum.

    Non-finite values are drawn as ``!``; a flat series sits in the middle.
    """
    blocks = _ASCII_BLOCKS if ascii_only else _BLOCKS
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "!" * len(values)
    low, high = min(finite), max(finite)
    top = len(blocks) - 1
    chars = []
    for v in values:
        if not math.isfinite(v):
            chars.append("!")
        elif high == low:
            chars.append(blocks[top // 2])
        else:
            chars.append(blocks[round((v - low) / (high - low) * top)])
    return "".join(chars)


def _step(step: int | None) -> str:
    return "-" if step is None else f"{step:,}"


def _header(snap: Snapshot, now: float) -> Text:
    text = Text()
    text.append(snap.mode, style="bold cyan")
    if snap.phase != "running":
        text.append(f" ({snap.phase})", style="bold red" if snap.phase in ("failed", "interrupted") else "yellow")
    text.append("   step ")
    text.append(_step(snap.step), style="bold")
    if snap.total is not None:
        text.append(f"/{snap.total:,}")
    text.append(f"   {format_rate(snap.rate)} steps/s   elapsed {format_duration(snap.elapsed_at(now))}")
    return text


def _progress(snap: Snapshot) -> Table | None:
    if snap.total is None or snap.total <= 0:
        return None
    done = min(snap.step, snap.total)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(ratio=1)
    grid.add_column(no_wrap=True)
    grid.add_row(
        ProgressBar(total=snap.total, completed=done),
        Text(f"{100 * done / snap.total:3.0f}%" + (f"  ETA {format_duration(snap.eta)}" if snap.running else "")),
    )
    return grid


def _metrics(rows: tuple[MetricRow, ...], *, ascii_only: bool) -> Table:
    table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False, header_style="bold")
    table.add_column("metric", no_wrap=True)
    table.add_column("last", justify="right", no_wrap=True)
    table.add_column("best", justify="right", no_wrap=True)
    table.add_column("at step", justify="right", no_wrap=True)
    table.add_column("recent", no_wrap=True, overflow="crop")
    for row in rows:
        table.add_row(
            Text(row.key),  # a Text, never markup: keys like "loss[train]" or "acc[/]" are names
            format_value(row.last),
            f"{format_value(row.best)} {row.goal}",
            _step(row.best_step),
            Text(sparkline(row.history, ascii_only=ascii_only), style="green"),
        )
    return table


def build(snap: Snapshot, now: float, *, ascii_only: bool = False) -> RenderableType:
    """The dashboard for ``snap`` as of ``now``: header, progress, metrics, eval, status."""
    parts: list[RenderableType] = [_header(snap, now)]
    progress = _progress(snap)
    if progress is not None:
        parts.append(progress)
    if snap.train:
        parts.extend([Text(""), _metrics(snap.train, ascii_only=ascii_only)])
    elif not snap.evals:
        parts.append(
            Text("waiting for the first values…" if not ascii_only else "waiting for the first values...", style="dim")
        )
    if snap.evals:
        parts.append(Text(f"\nevaluation at step {_step(snap.eval_step)}", style="bold magenta"))
        parts.append(_metrics(snap.evals, ascii_only=ascii_only))
    items = snap.status_items
    if items:
        parts.append(Text(""))
        parts.append(Text(" · " if not ascii_only else " | ").join(Text(item) for item in items))
    return Panel(Group(*parts), title=Text(snap.run_name, style="bold"), title_align="left", expand=True)


class Dashboard:
    """A renderable that draws a snapshot and never raises.

    rich's ``Live`` refresh thread dies silently on an exception; any failure is drawn as a
    one-line message instead, so the next frame can recover.
    """

    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.snapshot = snapshot
        self.now = now

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        try:
            ascii_only = options.ascii_only or not options.encoding.lower().startswith("utf")
            lines = console.render_lines(build(self.snapshot, self.now, ascii_only=ascii_only), options, pad=False)
        except Exception as error:  # the refresh thread must survive anything drawn
            yield Text(f"(dashboard could not be drawn: {type(error).__name__}: {error})", style="red")
            return
        for line in lines:
            yield from line
            yield Segment.line()


def _pairs(rows: tuple[MetricRow, ...]) -> str:
    return " | ".join(f"{row.key} {format_value(row.last)}" for row in rows)


def plain_line(snap: Snapshot) -> str:
    """``step 100/2000 | loss 0.123 | accuracy 0.97 | 52.3 steps/s | ETA 0:00:36``."""
    parts = [f"step {snap.step}" + (f"/{snap.total}" if snap.total is not None else "")]
    if snap.train:
        parts.append(_pairs(snap.train))
    parts.append(f"{format_rate(snap.rate)} steps/s")
    if snap.eta is not None:
        parts.append(f"ETA {format_duration(snap.eta)}")
    return " | ".join(parts)


def plain_eval_line(snap: Snapshot) -> str:
    """``eval at step 100 | eval/loss 0.2 | eval/accuracy 0.9``."""
    return " | ".join([f"eval at step {snap.eval_step}", _pairs(snap.evals)])


def plain_summary(snap: Snapshot) -> list[str]:
    """The lines printed when a plain-mode run closes."""
    lines = [
        f"{snap.run_name}: {snap.phase} at step {snap.step} after {format_duration(snap.elapsed)}"
        f" ({format_rate(snap.rate)} steps/s)"
    ]
    for row in snap.train + snap.evals:
        lines.append(
            f"  {row.key}: last {format_value(row.last)}, best ({row.goal}) {format_value(row.best)}"
            f" at step {row.best_step if row.best_step is not None else '-'}"
        )
    lines.extend(f"  {item}" for item in snap.status_items)
    return lines
