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

from rich.cells import cell_len
from rich.console import Group
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from hookbus.sink_api import BusStats, CheckpointSaved, better_direction

from ._health import health_items, health_summary

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

__all__ = [
    "Dashboard",
    "MetricRow",
    "MetricTracker",
    "Snapshot",
    "format_duration",
    "format_value",
    "best_direction",
    "plain_eval_line",
    "plain_line",
    "plain_summary",
    "saved_bests",
    "sparkline",
]

_BLOCKS = "▁▂▃▄▅▆▇█"
_ASCII_BLOCKS = "_.-:=+*#"
_MIN_SPARKLINE = 4  # narrower than this, the "recent" column is left out


@dataclass(frozen=True)
class MetricRow:
    """One scalar key as shown: last value, best so far and where, recent history."""

    key: str
    direction: str  # "min" or "max", by the one direction rule (or the goals= given)
    last: float | None  # None: no value yet in this process (a best restored from a checkpoint)
    best: float | None
    best_step: int | None
    history: tuple[float, ...]


def best_direction(key: str) -> str:
    """The direction of "best" for ``key`` (:func:`hookbus.sink_api.better_direction`, the rule
    early stopping's ``mode="auto"`` uses); ``"min"`` for names the rule cannot decide."""
    return better_direction(key) or "min"


class MetricTracker:
    """The mutable record of one scalar key, kept by the training thread; ``row()`` freezes it.

    Memory is bounded: the history is a deque of at most ``history`` values.
    """

    __slots__ = ("best", "best_step", "direction", "history", "key", "last")

    def __init__(self, key: str, direction: str, history: int) -> None:
        self.key = key
        self.direction = direction
        self.last: float | None = None
        self.best: float | None = None
        self.best_step: int | None = None
        self.history: deque[float] = deque(maxlen=history)

    def update(self, step: int, value: float) -> None:
        self.last = value
        self.history.append(value)
        if math.isfinite(value) and (
            self.best is None or (value < self.best if self.direction == "min" else value > self.best)
        ):
            self.best, self.best_step = value, step

    def restore_best(self, best: float, step: int) -> None:
        """The best saved beside the checkpoint a session resumed from (what came after is gone)."""
        self.best, self.best_step = best, step

    def row(self) -> MetricRow:
        return MetricRow(self.key, self.direction, self.last, self.best, self.best_step, tuple(self.history))


def saved_bests(trackers: Iterable[MetricTracker]) -> dict[str, list[float | int]]:
    """``{key: [best, best_step]}`` of every tracker with a best (the console sink's saved state)."""
    return {t.key: [t.best, t.best_step] for t in trackers if t.best is not None and t.best_step is not None}


@dataclass(frozen=True)
class Snapshot:
    """Everything the dashboard shows at one moment; never mutated after it is made.

    ``elapsed`` and ``rate`` are measured at ``taken_at`` (the sink's clock); while ``running``,
    the drawing adds the time since then to ``elapsed``. ``rate`` is recent (a moving average
    over a few seconds, shown "recent" while running); ``average`` is the run's (the steps its
    train sessions trained over ``elapsed``), shown once the run is over and in the summary, as are
    ``average_examples`` (its examples per second) and ``average_outside`` (its seconds outside the
    steps per step trained) in place of the recent ``examples_rate`` and ``outside``.
    """

    run_name: str
    mode: str = "train"
    phase: str = "starting"
    running: bool = True
    step: int = 0
    total: int | None = None
    epoch: int | None = None  # under fit: the epoch being trained, from 1, of ``epochs``
    epochs: int | None = None
    rate: float | None = None
    examples_rate: float | None = None  # recent examples per second, where the publisher counts examples
    outside: float | None = None  # recent seconds per step the training thread spent outside the steps
    average: float | None = None
    average_examples: float | None = None
    average_outside: float | None = None
    elapsed: float = 0.0
    taken_at: float = 0.0
    train: tuple[MetricRow, ...] = ()
    evals: tuple[MetricRow, ...] = ()
    eval_step: int | None = None
    checkpoint: CheckpointSaved | None = None
    stop: str | None = None
    errors: tuple[tuple[str, int], ...] = ()
    statuses: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    health: BusStats | None = None
    machine: str | None = None  # the last sample of the machine, in one line

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
    def footer(self) -> tuple[tuple[str, ...], ...]:
        """The footer's lines, each a tuple of parts, none repeated: the run's own (checkpoint,
        stop, resume, current activity, failure), the other sinks' status lines (while running),
        and errors when no health line (:attr:`health`) names them."""
        own: list[str] = []
        if self.checkpoint is not None:
            value = "" if self.checkpoint.value is None else f" ({format_value(self.checkpoint.value)})"
            own.append(f"checkpoint step {self.checkpoint.step:,}{value}")
        if self.stop:
            own.append(self.stop)
        own.extend(self.notes)
        errors = []
        if self.errors and self.health is None:
            errors.append("errors: " + ", ".join(f"{name} ×{count}" for name, count in self.errors))
        lines = (tuple(dict.fromkeys(own)), tuple(dict.fromkeys(self.statuses)), tuple(errors))
        return tuple(line for line in lines if line)

    @property
    def status_items(self) -> tuple[str, ...]:
        """Every part of :attr:`footer`, in order."""
        return tuple(item for line in self.footer for item in line)


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


def throughput_parts(snap: Snapshot) -> list[str]:
    """``1,234 examples/s`` and ``outside 12.3 ms/step``, where the snapshot has them: the recent figures
    while running, the run's averages once it is over (beside the average steps/s)."""
    parts = []
    rate = snap.examples_rate if snap.running else snap.average_examples
    if rate is not None:
        parts.append(f"{rate:,.0f} examples/s" if rate >= 100 else f"{rate:.1f} examples/s")
    outside = snap.outside if snap.running else snap.average_outside
    if outside is not None:
        parts.append(f"outside {outside * 1000:.1f} ms/step")
    return parts


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


def _header(snap: Snapshot, now: float, width: int) -> Text:
    """Mode, epoch, step, rate (examples/s and the time outside beside it) and elapsed time on one line
    of ``width`` cells: the gaps between them narrow (three spaces, two, one) before the line would wrap,
    and then the time outside, then examples/s, are left out (the plain lines keep them)."""
    mode = Text(snap.mode, style="bold cyan")
    if snap.phase != "running":
        mode.append(f" ({snap.phase})", style="bold red" if snap.phase == "crashed" else "yellow")
    parts = [mode]
    if snap.epoch is not None:
        epoch = Text("epoch ")
        epoch.append(f"{snap.epoch:,}", style="bold")
        epoch.append(f"/{snap.epochs:,}" if snap.epochs is not None else "")
        parts.append(epoch)
    step = Text("step ")
    step.append(_step(snap.step), style="bold")
    if snap.total is not None:
        step.append(f"/{snap.total:,}")
    # While running the rate is recent; once over, the run's average (as the summary's).
    rate = f"recent {format_rate(snap.rate)}" if snap.running else f"average {format_rate(snap.average)}"
    rate += " steps/s"
    parts += [step, Text(rate)]
    elapsed = Text(f"elapsed {format_duration(snap.elapsed_at(now))}")
    extra = [Text(part) for part in throughput_parts(snap)]
    while True:
        line = [*parts, *extra, elapsed]
        length = sum(part.cell_len for part in line) + len(line) - 1
        if length <= width or not extra:
            break
        extra.pop()  # the least needed first: the time outside, then examples/s
    length -= len(line) - 1
    gap = next((g for g in (3, 2) if length + g * (len(line) - 1) <= width), 1)
    return Text(" " * gap).join(line)


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


_HEADINGS = ("metric", "last", "best", "at step")
# Training values reach the dashboard on its own schedule (every 0.25 s), not every step: its
# "best" is the best of those it was sent, and says so. Every evaluation reaches it.
_TRAIN_HEADINGS = ("metric", "last", "best seen", "at step")
_GAP = 2  # spaces after each column
_NAME_MIN = 12  # a name column narrower than this would fold names into unreadable shreds


def _metrics(
    rows: tuple[MetricRow, ...], *, ascii_only: bool, width: int, headings: tuple[str, ...] = _HEADINGS
) -> Table:
    """The table of ``rows`` in ``width`` cells: names and numbers whole, the sparkline gets the rest.

    Numbers never wrap or shorten; a name too long for the width folds onto more lines rather
    than losing characters; the "recent" sparkline shows as many of the latest values as fit,
    and is left out below a few cells. Where even the numbers do not fit beside a readable name
    column, the "at step" column, then the "best" column, are left out rather than cut.
    """
    cells = [
        (row.key, format_value(row.last), f"{format_value(row.best)} {row.direction}", _step(row.best_step))
        for row in rows
    ]
    widths = [max([cell_len(heading)] + [cell_len(c[i]) for c in cells]) for i, heading in enumerate(headings)]
    shown = len(headings)  # the columns kept, from the left
    while shown > 2 and min(widths[0], _NAME_MIN) + sum(widths[1:shown]) + _GAP * shown > width:
        shown -= 1
    room = width - sum(widths[:shown]) - _GAP * shown  # what the last column, "recent", may take
    longest = max((len(row.history) for row in rows), default=0)
    spark = min(room, longest)
    table = Table(box=None, padding=(0, _GAP, 0, 0), pad_edge=False, show_edge=False, header_style="bold")
    # The one column that may wrap, never cut, and never squeezed below a readable width.
    table.add_column("metric", overflow="fold", min_width=min(widths[0], _NAME_MIN))
    for heading, w in zip(headings[1:shown], widths[1:shown], strict=True):
        table.add_column(heading, justify="right", no_wrap=True, min_width=w)
    if spark >= _MIN_SPARKLINE:
        heading = "recent" if room >= cell_len("recent") else ""
        table.add_column(heading, no_wrap=True, overflow="crop", width=max(spark, cell_len(heading)))
    for row, cell in zip(rows, cells, strict=True):
        # The name as a Text, never markup: "acc[/]" is a name.
        line: list[RenderableType] = [Text(cell[0]), *cell[1:shown]]
        if spark >= _MIN_SPARKLINE:
            line.append(Text(sparkline(row.history[-spark:], ascii_only=ascii_only), style="green"))
        table.add_row(*line)
    return table


def build(snap: Snapshot, now: float, *, ascii_only: bool = False, width: int = 120) -> RenderableType:
    """The dashboard for ``snap`` as of ``now`` in ``width`` cells: header, progress, metrics,
    eval, status, health."""
    inner = width - 4  # the panel's borders and padding
    parts: list[RenderableType] = [_header(snap, now, inner)]
    progress = _progress(snap)
    if progress is not None:
        parts.append(progress)
    if snap.train:
        train = _metrics(snap.train, ascii_only=ascii_only, width=inner, headings=_TRAIN_HEADINGS)
        parts.extend([Text(""), train])
    elif not snap.evals:
        parts.append(
            Text("waiting for the first values…" if not ascii_only else "waiting for the first values...", style="dim")
        )
    if snap.evals:
        parts.append(Text(f"\nevaluation at step {_step(snap.eval_step)}", style="bold magenta"))
        parts.append(_metrics(snap.evals, ascii_only=ascii_only, width=inner))
    separator = Text(" · " if not ascii_only else " | ")
    footer = snap.footer
    if footer or snap.health is not None or snap.machine is not None:
        parts.append(Text(""))
    if snap.machine is not None:
        parts.append(Text(snap.machine if not ascii_only else snap.machine.replace(" · ", " | "), style="cyan"))
    parts.extend(separator.join(Text(item) for item in line) for line in footer)
    if snap.health is not None:
        health = health_items(snap.health, snap.errors)
        parts.append(separator.join(Text(text, style=style) for text, style in health))
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
            frame = build(self.snapshot, self.now, ascii_only=ascii_only, width=options.max_width)
            lines = console.render_lines(frame, options, pad=False)
        except Exception as error:  # the refresh thread must survive anything drawn
            yield Text(f"(dashboard could not be drawn: {type(error).__name__}: {error})", style="red")
            return
        for line in lines:
            yield from line
            yield Segment.line()


def _pairs(rows: tuple[MetricRow, ...]) -> str:
    return " | ".join(f"{row.key} {format_value(row.last)}" for row in rows)


def _epoch(snap: Snapshot) -> str:
    return f"epoch {snap.epoch}" + (f"/{snap.epochs}" if snap.epochs is not None else "")


def plain_line(snap: Snapshot) -> str:
    """``step 100/2000 | loss 0.123 | accuracy 0.97 | recent 52.3 steps/s | 1,674 examples/s | outside 1.2
    ms/step | ETA 0:00:36`` (examples where counted, the time outside where measured); under fit
    ``epoch 3/12 | step 100/2000 | ...``."""
    parts = [] if snap.epoch is None else [_epoch(snap)]
    parts.append(f"step {snap.step}" + (f"/{snap.total}" if snap.total is not None else ""))
    if snap.train:
        parts.append(_pairs(snap.train))
    parts.append(f"recent {format_rate(snap.rate)} steps/s")
    if snap.running:  # the recent figures beside the recent rate (the summary has the run's averages)
        parts.extend(throughput_parts(snap))
    if snap.eta is not None:
        parts.append(f"ETA {format_duration(snap.eta)}")
    return " | ".join(parts)


def plain_eval_line(snap: Snapshot) -> str:
    """``eval at step 100 | eval/loss 0.2 | eval/accuracy 0.9``."""
    return " | ".join([f"eval at step {snap.eval_step}", _pairs(snap.evals)])


def plain_summary(snap: Snapshot) -> list[str]:
    """The lines printed when a plain-mode run closes: how it ended, at which step, after how
    long, at the run's average rate."""
    epoch = "" if snap.epoch is None else f" ({_epoch(snap)})"
    lines = [
        f"{snap.run_name}: {snap.phase} at step {snap.step}{epoch} after {format_duration(snap.elapsed)}"
        f" ({', '.join([f'{format_rate(snap.average)} steps/s', *throughput_parts(snap)])})"
    ]
    for rows, best in ((snap.train, "best seen"), (snap.evals, "best")):
        for row in rows:
            lines.append(
                f"  {row.key}: last {format_value(row.last)}, {best} ({row.direction}) {format_value(row.best)}"
                f" at step {row.best_step if row.best_step is not None else '-'}"
            )
    lines.extend(f"  {item}" for item in snap.status_items)
    if snap.machine is not None:
        lines.append(f"  {snap.machine}")
    if snap.health is not None:
        lines.append(f"  {health_summary(snap.health, snap.errors)}")
    return lines
