"""The dashboard's health line: every subscriber's cost and state from :meth:`hookbus.EventBus.stats`.

Pure functions of a :class:`hookbus.BusStats`: the live dashboard draws :func:`health_items`
(a failing sink in red, a slow one or a writer falling behind in yellow); plain mode prints
:func:`health_summary` when the run closes.
"""

from __future__ import annotations

from collections.abc import Sequence

from hookbus.sink_api import BusStats

__all__ = ["health_items", "health_summary"]

_SLOW_SECONDS = 1e-3  # a subscriber taking this much per due step stands out
_SLOW_CALL = 0.05  # a single call this long held a training step visibly
_BACKLOG = 0.5  # a writer whose queue is this full stands out (full: training waits for the disk)


class _Line:
    """The health line as it is built, naming each sink once: a fact about a sink already named
    joins that mention, in parentheses (``errors: CSVSink ×1 (disabled, 9 rows)``)."""

    _RANK = {"": 0, "green": 0, "bold yellow": 1, "red": 2, "bold red": 2}

    def __init__(self) -> None:
        # (label, mentions or None for a plain item, style); a mention is [name, fact, asides...]
        self.items: list[tuple[str, list[list[str]] | None, str]] = []
        self._named: dict[str, tuple[int, list[str]]] = {}  # name -> (item index, its mention)

    def add(self, text: str, style: str = "") -> None:
        self.items.append((text, None, style))

    def group(self, label: str, style: str = "") -> int:
        self.items.append((label, [], style))
        return len(self.items) - 1

    def mention(self, item: int, name: str, fact: str, style: str = "", aside: str | None = None) -> None:
        """Say ``fact`` about ``name`` in ``item``, or ``aside`` (default ``fact``) where it is named."""
        if name not in self._named:
            mention = [name, fact]
            mentions = self.items[item][1]
            assert mentions is not None
            mentions.append(mention)
            self._named[name] = (item, mention)
            return
        where, facts = self._named[name]
        facts.append(fact if aside is None else aside)
        label, mentions, old = self.items[where]
        if self._RANK.get(style, 0) > self._RANK.get(old, 0):
            self.items[where] = (label, mentions, style)

    def render(self) -> list[tuple[str, str]]:
        out = []
        for label, mentions, style in self.items:
            if mentions is None:
                out.append((label, style))
            elif mentions:  # a group nobody joined is left out
                parts = [
                    " ".join(p for p in m[:2] if p) + (f" ({', '.join(m[2:])})" if len(m) > 2 else "") for m in mentions
                ]
                out.append((label + ", ".join(parts), style))
        return out


def _line(stats: BusStats, errors: Sequence[tuple[str, int]], rows: bool) -> _Line:
    subs = stats.subscribers
    failing = [s for s in subs if s.failed]  # an error, disabled, a stalled writer or rows lost
    line = _Line()
    ok = f"sinks: {len(subs) - len(failing)} ok" + (f", {len(failing)} failing" if failing else "")
    line.add(ok, "red" if failing else "green")
    if stats.due_steps:
        line.add(f"{1e3 * stats.seconds_per_due_step:.2f} ms per due step")
    # ``errors`` (name, count) in the order they first failed, as a dashboard saw them; else
    # the subscribers' order.
    errors = errors or [(s.name, s.errors) for s in failing if s.errors]
    group = line.group("errors: ", "bold red")
    for name, count in errors:
        line.mention(group, name, f"×{count}", "bold red")
    if stats.due_steps:
        costliest = max(subs, key=lambda s: s.seconds, default=None)
        if costliest is not None and costliest.seconds > 0:
            per_step = costliest.seconds / stats.due_steps
            slow = "bold yellow" if per_step >= _SLOW_SECONDS else ""
            cost = f"{1e3 * per_step:.2f} ms"
            line.mention(line.group("most: ", slow), costliest.name, cost, slow, aside=f"most {cost}")
        # A mean hides the one call that held a step for seconds: each slow subscriber's slowest
        # call, beside its mean where that is shown.
        group = line.group("slowest call: ", "bold yellow")
        for s in subs:
            if s.max_seconds >= _SLOW_CALL or (s.step_calls and s.seconds / stats.due_steps >= _SLOW_SECONDS):
                slowest = _duration(s.max_seconds)
                line.mention(group, s.name, slowest, "bold yellow", aside=f"slowest call {slowest}")
    group = line.group("disabled: ", "bold red")
    for s in subs:
        if s.disabled:
            line.mention(group, s.name, "", "bold red", aside="disabled")
    for s in subs:
        if s.writer is not None and s.writer.stalled is not None:
            stalled = "stalled: " + s.writer.stalled.split(": ", 1)[-1]  # what its flush could not write
            line.mention(line.group("", "bold red"), s.name, stalled, "bold red")
        if s.writer is not None and s.writer.unreachable is not None:
            unreachable = s.writer.unreachable.split(": ", 1)[-1]  # its server, the error, what waits locally
            line.mention(line.group("", "bold yellow"), s.name, unreachable, "bold yellow")
        if s.writer is not None and s.writer.lost:
            what = "events not delivered" if s.kind == "function" else "rows not written"
            line.mention(line.group("", "bold red"), s.name, f"{s.writer.lost:,} {what}", "bold red")
        backlog = s.writer.backlog if s.writer is not None else None
        if backlog is not None and backlog >= _BACKLOG and s.writer is not None:
            queue = f"queue {s.writer.queued}/{s.writer.capacity}"
            line.mention(line.group("", "bold yellow"), s.name, queue, "bold yellow")
    if rows:
        for s in subs:
            if s.writer is not None:
                written = s.writer.rows if s.writer.written is None else s.writer.written
                delivered = "delivered" if s.kind == "function" else "rows"  # a function's rows are events
                line.mention(line.group(""), s.name, f"{written:,} {delivered}")
    return line


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1.0 else f"{1e3 * seconds:.2f} ms"


def health_items(stats: BusStats, errors: Sequence[tuple[str, int]] = ()) -> list[tuple[str, str]]:
    """The health line's parts as ``(text, style)``: how many subscribers are fine, their time on
    the training thread per due step, each failing one (red: ``errors: name ×n (disabled)``;
    a subscriber whose writer stalled or lost rows is failing too, never "ok"), the costliest one
    (yellow when slow), the slowest single call of each slow one (yellow: ``most: notify
    218.00 ms (slowest call 2.00 s)``; a mean per step hides the call that held a step for
    seconds), each writer stalled (red: what its flush could not write), the rows or events each
    writer lost (red: cut at the close deadline, or not written after a failure), each writer
    whose server does not answer (yellow: its URI, the error, what waits) and each writer falling
    behind (yellow). Each sink is
    named once: what else is said about it follows its name in parentheses.

    Args:
        stats: The bus's stats.
        errors: ``(name, count)`` of the failing subscribers in the order they first failed
            (default: the subscribers' order).
    """
    return _line(stats, errors, rows=False).render()


def health_summary(stats: BusStats, errors: Sequence[tuple[str, int]] = ()) -> str:
    """The health line as plain text, with the rows each writer wrote (plain mode's closing line)."""
    return " | ".join(text for text, _ in _line(stats, errors, rows=True).render())
