"""What ``hookbus watch`` draws under the console dashboard: each log's liveness, and a cluster's
workers (global step, each one's rate, its lag behind the furthest, who is stale, who asked to
stop and why, each one's last error), and their machine: a row per worker (its process's CPU and
memory, its GPUs, how long ago it was sampled) and each host's own figures once, however many
workers share the host.

Pure functions of the watcher's statuses (anything with the attributes of :class:`Worker`),
drawn with the dashboard's own formatting (:mod:`._render`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ._machine import gpu_figures, host_figures, process_figures
from ._render import Dashboard, Snapshot, format_rate, plain_line, plain_summary

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["Worker", "cluster_lines", "machine_lines", "watch_frame", "watch_snapshot"]

_STYLES = {
    "live": "green",
    "stale": "bold yellow",
    "presumed dead": "bold red",
    "crashed": "bold red",
    "stopped": "yellow",
    "finished": "cyan",
    "waiting": "dim",
}


class Worker(Protocol):
    """One watched log's status (``hookbus watch`` makes them)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def step(self) -> int | None: ...
    @property
    def rate(self) -> float | None: ...
    @property
    def examples_rate(self) -> float | None: ...
    @property
    def outside(self) -> float | None: ...
    @property
    def lag(self) -> int | None: ...
    @property
    def age(self) -> float | None: ...
    @property
    def stop(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def straggler(self) -> bool: ...
    @property
    def host(self) -> str | None: ...
    @property
    def task(self) -> str | None: ...
    @property
    def machine(self) -> Mapping[str, float] | None: ...
    @property
    def notice(self) -> str | None: ...
    @property
    def sample_age(self) -> float | None: ...


def format_age(seconds: float | None) -> str:
    """``0.4s``, ``12s``, ``3m05s``, ``2h07m``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _state(worker: Worker) -> str:
    return worker.state + (", straggler" if worker.straggler else "")


def _note(worker: Worker) -> str:
    parts = [f"stop: {worker.stop}"] if worker.stop else []
    if worker.error:
        parts.append(f"error: {worker.error}")
    return "; ".join(parts)


def _liveness(worker: Worker) -> Text:
    """``live · newest record 0.4s ago`` (and its stop or error) for a single log."""
    line = Text(_state(worker), style=_STYLES.get(worker.state, ""))
    line.append(f" · newest record {format_age(worker.age)} ago")
    if worker.sample_age is not None:
        line.append(f" · machine sampled {format_age(worker.sample_age)} ago")
    note = _note(worker)
    if note:
        line.append(f" · {note}")
    return line


def _table(workers: Sequence[Worker]) -> Table:
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("worker", no_wrap=True)
    table.add_column("state", no_wrap=True)
    # Examples per second and the time outside the steps where any worker's records carry them.
    examples = any(w.examples_rate is not None for w in workers)
    outside = any(w.outside is not None for w in workers)
    headings = ["step", "steps/s", *(["examples/s"] if examples else []), *(["outside ms"] if outside else [])]
    for heading in (*headings, "lag", "newest"):
        table.add_column(heading, justify="right", no_wrap=True)
    table.add_column("stop / last error", overflow="ellipsis", no_wrap=True, ratio=1)
    for w in workers:
        figures = [format_rate(w.examples_rate)] if examples else []
        if outside:
            figures.append("-" if w.outside is None else f"{w.outside * 1000:.1f}")
        table.add_row(
            Text(w.name),
            Text(_state(w), style=_STYLES.get(w.state, "")),
            "-" if w.step is None else f"{w.step:,}",
            format_rate(w.rate),
            *figures,
            "-" if w.lag is None else f"{w.lag:,}",
            format_age(w.age),
            Text(_note(w)),
        )
    return table


def _hosts(workers: Sequence[Worker]) -> list[tuple[str, Worker]]:
    """Each host once, with the worker whose sample of it is the newest (a log without a host
    name is a host of its own)."""
    newest: dict[str, Worker] = {}
    for w in workers:
        if w.machine is None:
            continue
        host = w.host if w.host is not None else f"({w.name}'s host)"
        found = newest.get(host)
        if found is None or (w.sample_age or 0.0) < (found.sample_age or 0.0):
            newest[host] = w
    return sorted(newest.items())


def _machine_row(w: Worker) -> list[str]:
    """host, task, process CPU, process RSS, GPUs, sampled ago."""
    if w.machine is None:
        return [w.host or "-", w.task or "-", "-", "-", "-", "no sample yet"]
    cpu, rss = process_figures(w.machine)
    return [w.host or "-", w.task or "-", cpu, rss, gpu_figures(w.machine, w.notice), f"{format_age(w.sample_age)} ago"]


def _machine_table(workers: Sequence[Worker]) -> Table:
    """A row per worker, its host first (a row never starts as the workers' table's rows do)."""
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, header_style="bold")
    for heading in ("host", "machine of", "task"):
        table.add_column(heading, no_wrap=True)
    for heading in ("CPU", "memory"):
        table.add_column(heading, justify="right", no_wrap=True)
    table.add_column("GPU", overflow="ellipsis", no_wrap=True)
    table.add_column("sampled", justify="right", no_wrap=True)
    for w in workers:
        host, *rest = _machine_row(w)
        table.add_row(Text(host), Text(w.name), *rest)
    return table


def machine_lines(workers: Sequence[Worker]) -> list[str]:
    """A cluster's machine, plain: one line per worker (``worker 1 machine: task worker:0 | host
    a | CPU 97% | memory 1.1 GB | NVML absent | sampled 3.0s ago``), then one per host with its
    own figures, once however many workers share it."""
    if not any(w.machine is not None for w in workers):
        return []
    lines = []
    for w in workers:
        host, task, cpu, rss, gpu, sampled = _machine_row(w)
        if w.machine is None:
            lines.append(f"{w.name} machine: {sampled}")
        else:
            lines.append(
                f"{w.name} machine: task {task} | host {host} | CPU {cpu} | memory {rss} | {gpu} | sampled {sampled}"
            )
    for host, w in _hosts(workers):
        lines.append(f"host {host}: {host_figures(w.machine or {})} (sampled {format_age(w.sample_age)} ago)")
    return lines


def _throughput(worker: Worker) -> list[str]:
    """``1,234 examples/s`` and ``outside 12.3 ms/step`` where the worker's records carry them."""
    parts = []
    if worker.examples_rate is not None:
        rate = worker.examples_rate
        parts.append(f"{rate:,.0f} examples/s" if rate >= 100 else f"{rate:.1f} examples/s")
    if worker.outside is not None:
        parts.append(f"outside {worker.outside * 1000:.1f} ms/step")
    return parts


def _global(workers: Sequence[Worker]) -> str:
    steps = [w.step for w in workers if w.step is not None]
    return f"cluster: global step {max(steps):,}" if steps else "cluster: no step yet"


def watch_frame(snapshot: Snapshot | None, workers: Sequence[Worker], cluster: bool, now: float) -> RenderableType:
    """The dashboard of ``snapshot`` (the chief's), then the liveness line or the workers' table."""
    parts: list[RenderableType] = []
    if snapshot is not None:
        parts.append(Dashboard(snapshot, now))
    if cluster:
        parts += [Text(_global(workers), style="bold"), _table(workers)]
        if any(w.machine is not None for w in workers):
            parts.append(_machine_table(workers))
            for host, w in _hosts(workers):
                line = Text(f"host {host}: ", style="bold")
                line.append(host_figures(w.machine or {}), style="cyan")  # its workers' rows say how old
                parts.append(line)
    elif workers:
        parts.append(_liveness(workers[0]))
    else:
        parts.append(Text("waiting for an event log", style="dim"))
    return Group(*parts)


def cluster_lines(workers: Sequence[Worker], sampled: bool = False) -> list[str]:
    """One plain line per worker: ``worker 1: live | step 1,200 | 31.0 steps/s | lag 3 | newest 0.4s``, with
    ``992 examples/s | outside 1.2 ms/step`` after the rate where its records carry them (``sampled``:
    and how long ago its machine was sampled, where a sample came)."""
    lines = []
    for w in workers:
        step = "-" if w.step is None else str(w.step)
        parts = [f"{w.name}: {_state(w)}", f"step {step}", f"{format_rate(w.rate)} steps/s"]
        parts += _throughput(w)
        if w.lag is not None:
            parts.append(f"lag {w.lag}")
        parts.append(f"newest record {format_age(w.age)} ago")
        if sampled and w.sample_age is not None:
            parts.append(f"machine sampled {format_age(w.sample_age)} ago")
        note = _note(w)
        if note:
            parts.append(note)
        lines.append(" | ".join(parts))
    return lines


def watch_snapshot(snapshot: Snapshot | None, workers: Sequence[Worker], cluster: bool) -> list[str]:
    """The plain snapshot ``hookbus watch --once`` prints: the dashboard's line and summary, then
    each log's state."""
    lines: list[str] = []
    if snapshot is not None:
        lines.append(plain_line(snapshot))
        lines.extend(plain_summary(snapshot))
    if cluster:
        lines.append(_global(workers))
    lines.extend(cluster_lines(workers, sampled=not cluster))
    if cluster:
        lines.extend(machine_lines(workers))
    return lines
