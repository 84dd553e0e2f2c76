"""``hookbus watch DIR`` over a directory of runs: one row per run, from each log's summary.

A directory of runs is a directory with no event log of its own whose subdirectories (at any depth)
hold event logs; each directory holding logs is one run (a cluster's per-worker logs included:
one row, in the state of its worst worker, as the cluster view says it). A row is read from the
summaries beside the logs (:func:`hookbus.read_run_summary`), never from a whole log, and is read
again only when a log changed (its size, modification time or inode), so a poll of a thousand
quiet runs costs a ``stat`` each.

A row: the run's name (its directory under DIR), its state word (how it ended, or live, stale,
presumed dead from the time since its newest write), its step and rate, the latest and best of the
metrics shown, its machine (its processes' CPU and memory, summed over a cluster's workers, and
its GPUs' mean utilization, from each log's newest sample as its summary keeps it, where it fits),
and the hyper-parameters that differ between runs (those all runs share are shown once above the
table). Sorted by any column, filtered by state and name. In a terminal the table is driven by keys
(:mod:`hookbus._watch._browse`); here, what it shows and its plain forms.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from hookbus._contract._ending import DEAD
from hookbus._contract._run_summary import KeySummary, RunSummary, read_run_summary
from hookbus._contract._system import PROCESS_CPU as _PROCESS_CPU
from hookbus._contract._system import PROCESS_MEMORY as _PROCESS_MEMORY
from hookbus._contract._system import system_gpu_of
from hookbus._watch._alerts import Alerter
from hookbus._watch._run import EXIT_STATUS, LIVE, STALE, WAITING, WORST_FIRST, overall
from hookbus._watch._watch import log_name

__all__ = [
    "FORMATS",
    "RunRow",
    "Sweep",
    "SweepOptions",
    "find_runs",
    "follow",
    "is_sweep",
    "once",
    "one_line_width",
    "render",
    "run_logs",
    "run_name",
    "select",
]

FORMATS = ("table", "csv", "json")
_FLUSH_SECS = 5.0  # EventLogSink's default flush interval, for summaries that do not say theirs
_STALE_INTERVALS = 3  # as the single-run view: no write for this many flush intervals is stale
_MAX_METRICS = 4  # metrics shown by default
_HPARAM_WIDTH = 14  # a hyper-parameter's column on one line: a longer value is cut short
Stat = tuple[int, int, int]  # size, mtime in ns, inode


def find_runs(root: Path) -> list[Path]:
    """The directories under ``root`` that hold event logs (``*.jsonl``), by name; ``root`` itself
    only when it holds logs (one run). A run's own subdirectories are not searched further (its
    TensorBoard runs)."""
    if root.is_dir() and any(root.glob("*.jsonl")):
        return [root]
    found: list[Path] = []
    for directory, subdirectories, files in os.walk(root, followlinks=True):
        subdirectories.sort()
        here = Path(directory)
        if here != root and any(name.endswith(".jsonl") for name in files):
            found.append(here)
            subdirectories.clear()
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def run_logs(run: Path) -> list[Path]:
    """A run's event logs, the chief's first: a lone log or a chief job's (``events.chief-0.jsonl``)
    before the workers' (``events.worker-<i>.jsonl``) by index."""
    return sorted(run.glob("*.jsonl"), key=lambda p: (log_name(p)[0], p.name))


def run_name(root: Path, run: Path) -> str:
    """A run's name: its directory under ``root`` (``root``'s own name when it is the one run)."""
    return run.relative_to(root).as_posix() if run != root else run.name


def is_sweep(path: Path) -> bool:
    """Whether ``path`` is a directory of runs (no log of its own; logs in its subdirectories)."""
    return path.is_dir() and not any(path.glob("*.jsonl")) and bool(find_runs(path))


@dataclass(frozen=True)
class RunRow:
    """One run as the table shows it.

    Attributes:
        name: Its directory under DIR.
        state: How it ended (finished, stopped, crashed), or live, stale, presumed dead, waiting.
        step: Its newest step (the furthest worker's).
        rate: Train steps per second (the chief's log, or the run's one log).
        workers: How many logs it has (1, or a cluster's workers).
        age: Seconds since its newest log was written (the files' modification time).
        hparams: Its hyper-parameters (the chief's log's).
        keys: Each key's latest and best (the chief's log's).
        error: The exception it crashed with, if any.
        last_train: The wall time of its newest training step's record (the chief's log).
        cpu: Its processes' CPU in percent of one core, summed over its logs' newest samples
            (``None`` before a sample).
        memory: Their resident memory in megabytes, summed likewise.
        gpu: The mean utilization of the GPUs those samples name (``None``: none).
    """

    name: str
    state: str
    step: int | None
    rate: float | None
    workers: int
    age: float | None
    hparams: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, KeySummary] = field(default_factory=dict)
    error: str | None = None
    last_train: float | None = None
    cpu: float | None = None
    memory: float | None = None
    gpu: float | None = None


def _machine(samples: Sequence[Mapping[str, float]]) -> dict[str, float | None]:
    """A run's machine from its logs' newest samples: processes summed, GPUs averaged."""
    cpu = [s[_PROCESS_CPU] for s in samples if _PROCESS_CPU in s]
    memory = [s[_PROCESS_MEMORY] for s in samples if _PROCESS_MEMORY in s]
    gpus = [
        v for s in samples for k, v in s.items() if (found := system_gpu_of(k)) and found[1] == "utilization_percentage"
    ]
    return {
        "cpu": sum(cpu) if cpu else None,
        "memory": sum(memory) if memory else None,
        "gpu": sum(gpus) / len(gpus) if gpus else None,
    }


def _state(summary: RunSummary, age: float, stale_after: float | None, dead_after: float) -> str:
    if summary.ended is not None:
        return summary.ended
    if summary.records == 0:
        return WAITING
    stale = stale_after if stale_after is not None else _STALE_INTERVALS * (summary.flush_secs or _FLUSH_SECS)
    if age > dead_after:
        return DEAD
    return STALE if age > stale else LIVE


class Sweep:
    """The runs under ``root``, read from their summaries, re-read only where a log changed.

    Args:
        root: The directory of runs.
        stale_after: Seconds without a write before a live run is stale (``None``: three of its
            flush intervals).
        dead_after: Seconds without a write (and no end) before it is presumed dead.
        clock: The wall clock the logs' modification times are compared with.
    """

    def __init__(
        self,
        root: Path,
        *,
        stale_after: float | None = None,
        dead_after: float = 120.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self.stale_after = stale_after
        self.dead_after = dead_after
        self.clock = clock
        self._read: dict[Path, tuple[Stat, RunSummary]] = {}
        self.reads = 0  # summaries read (a changed log), for the benchmark

    def _summary(self, log: Path) -> tuple[RunSummary, float] | None:
        try:
            stat = log.stat()
        except FileNotFoundError:
            return None
        key = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        kept = self._read.get(log)
        if kept is None or kept[0] != key:
            try:
                summary = read_run_summary(log)
            except FileNotFoundError:
                return None
            self.reads += 1
            self._read[log] = kept = (key, summary)
        return kept[1], stat.st_mtime

    def rows(self) -> list[RunRow]:
        """Every run's row now, by name."""
        now = self.clock()
        rows = []
        for run in find_runs(self.root):
            read = [found for log in run_logs(run) if (found := self._summary(log)) is not None]
            if not read:
                continue
            states = [_state(s, max(now - mtime, 0.0), self.stale_after, self.dead_after) for s, mtime in read]
            chief = read[0][0]
            steps = [summary.step for summary, _ in read if summary.step is not None]
            errors = [summary.error for summary, _ in read if summary.error]
            rows.append(
                RunRow(
                    name=run_name(self.root, run),
                    state=overall(states),
                    step=max(steps, default=None),
                    rate=chief.rate,
                    workers=len(read),
                    age=max(now - max(mtime for _, mtime in read), 0.0),
                    hparams=dict(chief.hparams or {}),
                    keys=dict(chief.keys),
                    error=errors[-1] if errors else None,
                    last_train=None if chief.train_last is None else chief.train_last[1],
                    **_machine([summary.machine for summary, _ in read if summary.machine]),
                )
            )
        return rows


# -- what is shown --------------------------------------------------------------------------------
def _same(value: Any) -> tuple[str, Any]:
    """What decides whether two hyper-parameters' values are one (1, 1.0 and True are three): a
    scalar by its type and value, anything else by its JSON (json.dumps for every value of a
    thousand runs took most of a frame)."""
    if isinstance(value, float):
        return "float", repr(value)  # NaN is one value, as its JSON is
    if value is None or isinstance(value, (bool, int, str)):
        return type(value).__name__, value
    return "json", json.dumps(value, sort_keys=True)


def shared_hparams(rows: Sequence[RunRow]) -> tuple[dict[str, Any], list[str]]:
    """The hyper-parameters every run has with one value, and the names of those that differ."""
    names = sorted({name for row in rows for name in row.hparams})
    shared: dict[str, Any] = {}
    differing: list[str] = []
    for name in names:
        values = {_same(row.hparams.get(name)) for row in rows}
        if len(values) == 1 and all(name in row.hparams for row in rows):
            shared[name] = rows[0].hparams[name]
        else:
            differing.append(name)
    return shared, differing


def default_metrics(rows: Sequence[RunRow]) -> list[str]:
    """The metrics shown when none are named: the evaluation keys first, then training's, the
    keys most runs have, at most four."""
    counts: dict[str, int] = {}
    for row in rows:
        for name in row.keys:
            counts[name] = counts.get(name, 0) + 1
    ranked = sorted(counts, key=lambda k: (not k.startswith("eval/"), k.startswith("test/"), -counts[k], k))
    return ranked[:_MAX_METRICS]


def _number(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}"


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.3g}"


_MACHINE_WIDTH = 24  # "CPU 400% 12.3 GB GPU 88%" and its padding


def _fixed_width(rows: Sequence[RunRow]) -> int:
    """The table's width without its metrics: run, state, step, rate, the differing hyper-parameters."""
    _, differing = shared_hparams(rows)
    names = max((len(r.name) + (3 if r.workers > 1 else 0) for r in rows), default=3)
    return min(names, 28) + 14 + 8 + 8 + sum(max(len(n), 6) + 2 for n in differing)


def _machine_fits(rows: Sequence[RunRow], metrics: Sequence[str], width: int) -> bool:
    return _fixed_width(rows) + 24 * len(metrics) + _MACHINE_WIDTH <= width


def fitting_metrics(metrics: Sequence[str], rows: Sequence[RunRow], width: int) -> list[str]:
    """As many of ``metrics`` (at least one) as fit ``width`` beside the other columns (the
    machine's too, where it fits beside one metric)."""
    fixed = _fixed_width(rows)
    if any(row.cpu is not None for row in rows) and _machine_fits(rows, metrics[:1], width):
        fixed += _MACHINE_WIDTH
    room = max(width - fixed, 0) // 24
    return list(metrics[: max(room, 1)])


def _best(key: KeySummary | None) -> str:
    if key is None or key.best is None:
        return "-"
    return f"{_number(key.best)} @{key.best_step}"


def _machine_cell(row: RunRow) -> str:
    """``CPU 97% 1.1 GB GPU 88%``: its processes' CPU and memory, its GPUs' mean utilization."""
    if row.cpu is None and row.memory is None:
        return "-"
    parts = [f"CPU {row.cpu:.0f}%" if row.cpu is not None else "CPU -"]
    if row.memory is not None:
        parts.append(f"{row.memory / 1000:.1f} GB")
    if row.gpu is not None:
        parts.append(f"GPU {row.gpu:.0f}%")
    return " ".join(parts)


def _hparam(value: Any) -> str:
    return "-" if value is None else str(value)


def _sort_key(column: str) -> Callable[[RunRow], Any]:
    """How rows sort by ``column``: a metric by its best (best first), ``hp:<name>`` or a
    hyper-parameter's name by its value, or ``run``, ``state``, ``step``, ``rate``, ``age``."""

    def missing_last(value: Any) -> tuple[bool, Any]:
        return (value is None, value if value is not None else 0)

    if column in ("run", "name"):
        return lambda row: row.name
    if column == "state":
        return lambda row: (WORST_FIRST.index(row.state) if row.state in WORST_FIRST else 99, row.name)
    if column in ("step", "rate", "age", "workers"):
        return lambda row: missing_last(getattr(row, column))
    metric = column[:-7] if column.endswith(" latest") else column
    if column.startswith("hp:"):
        name = column[3:]
        return lambda row: (name not in row.hparams, str(row.hparams.get(name)))

    def by_metric(row: RunRow) -> tuple[bool, float]:
        key = row.keys.get(metric)
        if key is None:
            return (True, 0.0)
        if column.endswith(" latest"):
            value = key.latest
            return (value is None or not math.isfinite(value), value if value is not None else 0.0)
        if key.best is None:
            return (True, 0.0)
        return (False, -key.best if key.direction == "max" else key.best)

    return by_metric


_COLUMNS = ("run", "name", "state", "step", "rate", "age", "workers")


def check_sort(sort: str | None, rows: Sequence[RunRow]) -> None:
    """Refuse a ``--sort`` that names no column of these runs (a typo would sort nothing, silently)."""
    if sort is None or not rows:
        return
    column = sort[:-7] if sort.endswith(" latest") else sort
    keys = sorted({k for r in rows for k in r.keys})
    hparams = sorted({n for r in rows for n in r.hparams})
    if column not in _COLUMNS and column not in keys and column not in hparams and not column.startswith("hp:"):
        named = ", ".join(c for c in _COLUMNS if c != "name")
        raise ValueError(
            f"--sort {sort!r} names no column of these runs: expected one of {named}, a metric "
            f"({', '.join(keys) or 'none recorded'}) or a hyper-parameter ({', '.join(hparams) or 'none recorded'})"
        )


def select(
    rows: Sequence[RunRow],
    *,
    states: Iterable[str] = (),
    name: str | None = None,
    sort: str | None = None,
    reverse: bool = False,
) -> list[RunRow]:
    """The rows shown: those in ``states`` (all when empty) whose name matches the glob ``name``,
    sorted by ``sort`` (see :func:`_sort_key`; a hyper-parameter by its name)."""
    wanted = set(states)
    shown = [r for r in rows if (not wanted or r.state in wanted) and (name is None or fnmatch.fnmatch(r.name, name))]
    if sort is not None:
        column = f"hp:{sort}" if sort in {n for r in rows for n in r.hparams} else sort
        shown.sort(key=_sort_key(column), reverse=reverse)
    return shown


def table(
    rows: Sequence[RunRow],
    every: Sequence[RunRow],
    metrics: Sequence[str],
    title: str,
    *,
    selected: str | None = None,
    one_line: bool = False,
    hparams: Sequence[str] | None = None,
    machine: bool | None = None,
    width: int | None = None,
) -> Table:
    """The rich table of ``rows``; ``every`` row decides which hyper-parameters are shared.

    ``one_line``: each row on one line (cells cut short rather than wrapped), so that a screen's
    height holds a known number of rows; ``selected``: the run marked ``>`` (and in reverse video;
    ``""``: none, every name indented as if one were); ``hparams``: the differing hyper-parameters
    given a column (default: all of them); ``machine``: whether the machine column is shown
    (default: where a run has a sample and it fits ``width`` beside the rest).
    """
    shared, differing = shared_hparams(every)
    if hparams is not None:
        differing = [name for name in differing if name in hparams]
    caption = "shared: " + "  ".join(f"{k}={_hparam(v)}" for k, v in shared.items()) if shared else None
    grid = Table(
        title=title, caption=caption, caption_justify="left", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    grid.add_column("run", overflow="ellipsis" if one_line else "fold", max_width=28, no_wrap=one_line)
    grid.add_column("state", no_wrap=True)
    grid.add_column("step", justify="right", no_wrap=one_line)
    grid.add_column("steps/s", justify="right", no_wrap=one_line)
    for metric in metrics:
        grid.add_column(metric, justify="right", no_wrap=one_line)
        grid.add_column(f"best {metric}", justify="right", no_wrap=one_line)
    if machine is None:
        machine = any(row.cpu is not None for row in every) and (width is None or _machine_fits(every, metrics, width))
    if machine:
        grid.add_column("machine", no_wrap=True)
    for name in differing:
        grid.add_column(name, justify="right", no_wrap=one_line, max_width=_HPARAM_WIDTH if one_line else None)
    for row in rows:
        cells = _cells(row, metrics, differing, selected, machine=machine)
        grid.add_row(*cells, style="reverse" if selected is not None and row.name == selected else None)
    return grid


def _cells(
    row: RunRow, metrics: Sequence[str], differing: Sequence[str], selected: str | None, *, machine: bool = False
) -> list[str]:
    """A row's cells as :func:`table` shows them (``machine``: with the machine column)."""
    name = row.name + (f" ×{row.workers}" if row.workers > 1 else "")
    if selected is not None:
        name = ("> " if row.name == selected else "  ") + name
    cells = [name, row.state, _hparam(row.step), _rate(row.rate)]
    for metric in metrics:
        key = row.keys.get(metric)
        cells += [_number(key.latest if key is not None else None), _best(key)]
    if machine:
        cells.append(_machine_cell(row))
    return cells + [_hparam(row.hparams.get(name)) for name in differing]


def one_line_width(
    rows: Sequence[RunRow], metrics: Sequence[str], hparams: Sequence[str], *, machine: bool = False
) -> int:
    """The width :func:`table` needs to show ``rows`` with ``one_line`` and a selection, its cells
    uncut: counted from the cells' text (measuring the rich table of a thousand rows would take
    most of a second)."""
    headers = ["run", "state", "step", "steps/s"] + [h for m in metrics for h in (m, f"best {m}")]
    headers += ["machine"] * machine + list(hparams)
    widths = [cell_len(header) for header in headers]
    for row in rows:
        for index, cell in enumerate(_cells(row, metrics, hparams, "", machine=machine)):
            widths[index] = max(widths[index], cell_len(cell))
    widths[0] = min(widths[0], 28)
    first = 4 + 2 * len(metrics) + machine  # the hyper-parameters' columns, each cut at _HPARAM_WIDTH
    widths[first:] = [min(w, _HPARAM_WIDTH) for w in widths[first:]]
    # A space each side of each column but the outer sides, a separator between columns, the two edges.
    return sum(widths) + 3 * len(widths) - 1


def render(
    rows: Sequence[RunRow], every: Sequence[RunRow], metrics: Sequence[str], fmt: str, *, title: str, width: int = 200
) -> str:
    """``rows`` as text: a plain table, CSV (one header row) or JSON (the shared hyper-parameters
    and one object per run)."""
    shared, differing = shared_hparams(every)
    if fmt == "json":
        runs = [
            {
                "run": r.name,
                "state": r.state,
                "step": r.step,
                "rate": r.rate,
                "workers": r.workers,
                "error": r.error,
                "hparams": r.hparams,
                "metrics": {m: r.keys[m].as_dict() for m in metrics if m in r.keys},
                "machine": {"cpu_percent": r.cpu, "memory_megabytes": r.memory, "gpu_percent": r.gpu},
            }
            for r in rows
        ]
        return json.dumps({"shared_hparams": shared, "runs": runs}, indent=1, allow_nan=True) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        head = ["run", "state", "step", "rate", "workers"]
        for metric in metrics:
            head += [metric, f"{metric} best", f"{metric} best step"]
        head += ["cpu percent", "memory megabytes", "gpu percent"]
        writer.writerow(head + [f"hp.{name}" for name in [*shared, *differing]])
        for r in rows:
            line: list[Any] = [r.name, r.state, r.step, r.rate, r.workers]
            for metric in metrics:
                key = r.keys.get(metric)
                line += [None, None, None] if key is None else [key.latest, key.best, key.best_step]
            line += [r.cpu, r.memory, r.gpu]
            writer.writerow(line + [r.hparams.get(name) for name in [*shared, *differing]])
        return out.getvalue()
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False, highlight=False)
    console.print(table(rows, every, metrics, title, width=width))
    text: str = console.file.getvalue()  # type: ignore[attr-defined]
    return text


def worst(rows: Sequence[RunRow]) -> str:
    """The state of the sweep: the first of crashed, presumed dead, stale, live, ... any run is in."""
    return overall(row.state for row in rows)


# -- the command ----------------------------------------------------------------------------------
_ENDED = frozenset({"finished", "stopped", "crashed"})


@dataclass(frozen=True)
class SweepOptions:
    """What ``hookbus watch DIR`` was asked to show (see :func:`add_sweep_options`)."""

    fmt: str = "table"
    sort: str | None = None
    reverse: bool = False
    states: tuple[str, ...] = ()
    name: str | None = None
    metrics: tuple[str, ...] = ()


def shown_rows(sweep: Sweep, options: SweepOptions, width: int) -> tuple[list[RunRow], list[RunRow], list[str]]:
    """Every row, the rows shown (filtered, sorted) and the metrics shown (those named; else the
    default ones that fit ``width`` in a table)."""
    every = sweep.rows()
    check_sort(options.sort, every)
    metrics = list(options.metrics) or default_metrics(every)
    if not options.metrics and options.fmt == "table":
        metrics = fitting_metrics(metrics, every, width)
    shown = select(every, states=options.states, name=options.name, sort=options.sort, reverse=options.reverse)
    return every, shown, metrics


def once(
    sweep: Sweep, options: SweepOptions, out: io.TextIOBase | Any, width: int, alerter: Alerter | None = None
) -> int:
    """Print the table (or CSV, JSON) once (and send the alerts of what changed since the state
    file's last look); the exit status of the worst state among the runs shown."""
    every, shown, metrics = shown_rows(sweep, options, width)
    if alerter is not None:
        alerter.observe(every)
    title = f"{len(shown)} of {len(every)} runs in {sweep.root}"
    out.write(render(shown, every, metrics, options.fmt, title=title, width=width))
    out.flush()
    return EXIT_STATUS[worst(shown)] if shown else EXIT_STATUS[WAITING]


def follow(
    sweep: Sweep,
    options: SweepOptions,
    console: Console,
    *,
    interval: float,
    keep_following: bool,
    alerter: Alerter | None = None,
) -> int:
    """Off a terminal: print each run's state changes, then the table, once every run shown has
    ended (unless ``keep_following``); the exit status of the worst state. (In a terminal the
    table is live and driven by keys: :func:`hookbus._watch._browse.browse`.)"""
    said: dict[str, str] = {}
    shown: list[RunRow] = []

    def look() -> None:
        every, rows, _ = shown_rows(sweep, options, console.width)
        nonlocal shown
        shown = rows
        if alerter is not None:
            alerter.observe(every)

    def done() -> bool:
        return not keep_following and bool(shown) and all(r.state in _ENDED for r in shown)

    while True:
        look()
        for row in shown:
            text = row.state + (f": {row.error}" if row.error and row.state in ("crashed", DEAD) else "")
            if said.get(row.name) != text:
                said[row.name] = text
                console.print(f"{row.name}: {text}", highlight=False, soft_wrap=True)
        if done():
            break
        time.sleep(interval)
    every, rows, metrics = shown_rows(sweep, options, console.width)
    console.print(table(rows, every, metrics, f"{len(rows)} of {len(every)} runs in {sweep.root}", width=console.width))
    return EXIT_STATUS[worst(shown)] if shown else EXIT_STATUS[WAITING]
