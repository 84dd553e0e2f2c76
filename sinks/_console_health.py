"""The dashboard's health line: every subscriber's cost and state from :meth:`hookbus.EventBus.stats`.

Pure functions of a :class:`hookbus.BusStats`: the live dashboard draws :func:`health_items`
(a failing sink in red, a slow one or a writer falling behind in yellow); plain mode prints
:func:`health_summary` when the run closes.
"""

from __future__ import annotations

from collections.abc import Sequence

from hookbus._stats import BusStats

__all__ = ["health_items", "health_summary"]

_SLOW_SECONDS = 1e-3  # a subscriber taking this much per due step stands out
_BACKLOG = 0.5  # a writer whose queue is this full stands out (full: training waits for the disk)


def health_items(stats: BusStats, errors: Sequence[tuple[str, int]] = ()) -> list[tuple[str, str]]:
    """The health line's parts as ``(text, style)``: how many subscribers are fine, their time on
    the training thread per due step and the costliest one, then each failing one (red), each
    writer stalled (red: what its flush could not write) and each writer falling behind (yellow).

    Args:
        stats: The bus's stats.
        errors: ``(name, count)`` of the failing subscribers in the order they first failed
            (default: the subscribers' order).
    """
    subs = stats.subscribers
    failing = [s for s in subs if s.errors or s.disabled]
    ok = f"sinks: {len(subs) - len(failing)} ok" + (f", {len(failing)} failing" if failing else "")
    items = [(ok, "red" if failing else "green")]
    if stats.due_steps:
        items.append((f"{1e3 * stats.seconds_per_due_step:.2f} ms per due step", ""))
        costliest = max(subs, key=lambda s: s.seconds, default=None)
        if costliest is not None and costliest.seconds > 0:
            per_step = costliest.seconds / stats.due_steps
            slow = per_step >= _SLOW_SECONDS
            items.append((f"most: {costliest.name} {1e3 * per_step:.2f} ms", "bold yellow" if slow else ""))
    # ``errors`` (name, count) in the order they first failed, as a dashboard saw them; else
    # the subscribers' order.
    errors = errors or [(s.name, s.errors) for s in failing if s.errors]
    if errors:
        items.append(("errors: " + ", ".join(f"{name} ×{count}" for name, count in errors), "bold red"))
    disabled = [s.name for s in subs if s.disabled]
    if disabled:
        items.append(("disabled: " + ", ".join(disabled), "bold red"))
    for s in subs:
        if s.writer is not None and s.writer.stalled is not None:
            items.append((f"{s.name} stalled: " + s.writer.stalled.split(": ", 1)[-1], "bold red"))
        backlog = s.writer.backlog if s.writer is not None else None
        if backlog is not None and backlog >= _BACKLOG and s.writer is not None:
            items.append((f"{s.name} queue {s.writer.queued}/{s.writer.capacity}", "bold yellow"))
    return items


def health_summary(stats: BusStats, errors: Sequence[tuple[str, int]] = ()) -> str:
    """The health line as plain text, with the rows each writer wrote (plain mode's closing line)."""
    items = [text for text, _ in health_items(stats, errors)]
    for s in stats.subscribers:
        if s.writer is not None:
            written = s.writer.rows if s.writer.written is None else s.writer.written
            items.append(f"{s.name} {written:,} rows")
    return " | ".join(items)
