"""``hookbus watch``: the live dashboard of a run that runs elsewhere, from its event logs alone.

The watcher only reads files (no server, no socket, nothing in the training process): it polls
each log (:mod:`hookbus._watch._follow`), shows it through the console sink's own rendering fed by
a replay publisher in follow mode (:mod:`hookbus._watch._view`), and says whether each run or
worker is live, stale, presumed dead, finished, stopped or crashed (:mod:`hookbus._watch._run`).
A directory with per-worker logs (``events.worker-<i>.jsonl``) is one cluster: the chief's
dashboard (the lowest index) above a row per worker.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Protocol

from rich.console import Console, Group, RenderableType
from rich.text import Text

from hookbus._contract._ending import CRASHED, DEAD, FINISHED, STOPPED
from hookbus._contract._sink import Sink
from hookbus._watch._run import EXIT_STATUS, LIVE, WorkerStatus, overall
from hookbus._watch._view import Gate, LogView, MakeSink

__all__ = ["Rendering", "Watch", "log_name"]

_WORKER = re.compile(r"^(?P<stem>.+)\.worker-(?P<index>\d+)\.jsonl$")
_DONE = frozenset({FINISHED, STOPPED, CRASHED})
Statuses = tuple[WorkerStatus, ...]


class Display(Protocol):
    """A live display drawing a renderable over and over (the console sink's terminal display)."""

    def start(self, on_exit: Callable[[], None]) -> None: ...
    def stop(self, summary: Iterable[str]) -> None: ...


@dataclass(frozen=True)
class Rendering:
    """How the watcher draws: the console sink's parts, handed in by the ``hookbus`` command.

    Attributes:
        make_sink: Makes the dashboard's sink for one log.
        frame: The live frame: (the chief's sink or ``None``, every log's status, cluster view?).
        plain_line: A sink's one-line progress (plain mode).
        snapshot: The plain snapshot (``--once``): (the chief's sink, statuses, cluster view?).
        display: The live display on ``console`` drawing ``get_renderable()`` (a terminal).
        summary: A closed sink's summary lines (plain mode).
    """

    make_sink: MakeSink
    frame: Callable[[Sink | None, Statuses, bool], RenderableType]
    plain_line: Callable[[Sink], str]
    snapshot: Callable[[Sink | None, Statuses, bool], list[str]]
    display: Callable[[Console, Callable[[], RenderableType]], Display]
    summary: Callable[[Sink], list[str]]


def log_name(path: Path) -> tuple[int, str]:
    """How a log is named and ordered: ``(index, "worker <index>")``, or ``(-1, file name)``."""
    match = _WORKER.match(path.name)
    return (int(match["index"]), f"worker {match['index']}") if match else (-1, path.name)


class Watch:
    """Follows ``path`` (a log, or a directory of logs) until its run ends (or for ever).

    Args:
        path: An event log, or a directory holding ``*.jsonl`` logs (``events.jsonl``,
            ``events.worker-<i>.jsonl``); neither need exist yet.
        rendering: The drawing parts (:class:`Rendering`).
        live: Draw the live dashboard (a terminal) rather than plain lines.
        console: Where to draw.
        stale_after: Seconds without a new record before a log is stale (``None``: three of
            its expected intervals, the writer's flush interval or the records' spacing).
        dead_after: Seconds without a new record before a log is presumed dead.
        interval: Seconds between polls.
        follow: After the run ends, keep waiting for a next run in the same place.
        clock: The watcher's monotonic clock.
        on_poll: Called after each poll (the alerts' look at the run).
        leave: In place of the wait between polls (a terminal only): waits at most the given
            seconds for the user's keys and says whether they asked to leave. With it, the view
            stays up after the run has ended, until they do (a run opened from the table of runs).
        footer: A line drawn under each live frame (the keys that leave).
    """

    def __init__(
        self,
        path: Path,
        rendering: Rendering,
        *,
        live: bool,
        console: Console,
        stale_after: float | None,
        dead_after: float,
        interval: float,
        follow: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_poll: Callable[[], object] | None = None,
        leave: Callable[[float], bool] | None = None,
        footer: str | None = None,
    ) -> None:
        self.path = path
        self.rendering = rendering
        self.live = live
        self.console = console
        self.stale_after = stale_after
        self.dead_after = dead_after
        self.interval = interval
        self.follow = follow
        self.clock = clock
        self.on_poll = on_poll
        self.leave = leave
        self.footer = footer
        self.views: list[LogView] = []
        self.statuses: Statuses = ()
        self._stream: IO[str] = console.file
        self._frame: RenderableType = ""

    @property
    def cluster(self) -> bool:
        """Whether the logs are per-worker logs (a cluster view)."""
        return any(log_name(view.path)[0] >= 0 for view in self.views)

    @property
    def chief(self) -> LogView | None:
        """The log whose dashboard is drawn: the lowest worker index, or the one log."""
        return self.views[0] if self.views else None

    def _discover(self) -> None:
        if self.path.is_dir():
            found = sorted(self.path.glob("*.jsonl"), key=lambda p: (log_name(p)[0], p.name))
            # PATH named nothing when the watcher started, so it was followed as a log to come;
            # now a directory, it is a directory of logs: the logs that appear in it are watched.
            self.views = [view for view in self.views if view.path != self.path]
        else:
            found = [self.path]
        known = {view.path for view in self.views}
        for path in found:
            if path not in known:
                self.views.append(
                    LogView(
                        path, log_name(path)[1], self.rendering.make_sink, Gate(self._stream, False), clock=self.clock
                    )
                )
        self.views.sort(key=lambda view: (log_name(view.path)[0], view.path.name))
        for view in self.views:  # off a terminal, only the chief prints the console sink's lines
            view.loud = not self.live and view is self.views[0]

    def poll(self) -> Statuses:
        """Read every log once; the statuses now (raises NotAnEventLogError for a foreign file)."""
        self._discover()
        for view in self.views:
            view.poll()
        statuses = tuple(view.status(self.stale_after, self.dead_after) for view in self.views)
        steps = [s.step for s in statuses if s.step is not None]
        rates = [s.recent for s in statuses if s.state == LIVE and s.recent]
        fastest = max(rates, default=None)
        self.statuses = tuple(
            replace(
                s,
                lag=None if s.step is None or len(statuses) < 2 else max(steps) - s.step,
                straggler=bool(fastest and s.state == LIVE and s.recent is not None and s.recent < fastest / 2),
            )
            for s in statuses
        )
        if self.on_poll is not None:
            self.on_poll()
        return self.statuses

    @property
    def state(self) -> str:
        """The run's state (see :func:`hookbus._watch._run.overall`)."""
        return overall(s.state for s in self.statuses)

    def once(self) -> int:
        """Print one plain snapshot; the exit status of the run's state."""
        self.poll()
        self._close_ended()
        chief = self.chief
        for line in self.rendering.snapshot(chief.sink if chief else None, self.statuses, self.cluster):
            self._stream.write(line + "\n")
        for view in self.views:
            view.close()
        return EXIT_STATUS[self.state]

    def _close_ended(self) -> list[LogView]:
        """Close the dashboards of the logs whose run has ended (they show how it ended); those
        closed now."""
        return [v for v, s in zip(self.views, self.statuses, strict=True) if s.state in _DONE and v.close()]

    def _summaries(self, views: list[LogView]) -> None:
        """Off a terminal: the summary of each closed view that prints (the chief), as ConsoleSink's."""
        for view in views:
            if view.loud and view.sink is not None:
                for line in self.rendering.summary(view.sink):
                    self._say(line)

    def run(self) -> int:
        """Watch until the run ends (not with ``follow``); the exit status of its last state."""
        if not self.live:
            return self._run_plain()
        display = self.rendering.display(self.console, lambda: self._frame)
        display.start(on_exit=lambda: display.stop(()))
        try:
            while True:
                self.poll()
                ended = self._ended()
                self._close_ended()  # an ended run's dashboard says how it ended (a next one is shown anew)
                chief = self.chief
                frame = self.rendering.frame(chief.sink if chief else None, self.statuses, self.cluster)
                if self.footer is not None:
                    frame = Group(frame, Text(self.footer, no_wrap=True, overflow="ellipsis"))
                self._frame = frame
                if self.leave is not None:
                    if self.leave(self.interval):
                        break
                    continue
                if ended:
                    break
                time.sleep(self.interval)
        finally:
            for view in self.views:
                view.close()
            display.stop(())  # draws the last frame, gives the terminal back
        return EXIT_STATUS[self.state]

    def _ended(self) -> bool:
        return not self.follow and bool(self.statuses) and all(s.state in _DONE for s in self.statuses)

    def _say(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()

    def _run_plain(self) -> int:
        said: dict[str, str] = {}
        waiting = False
        try:
            while True:
                before = {view.name: view.sink for view in self.views}
                self.poll()
                if not any(view.exists for view in self.views) and not waiting:
                    waiting = True
                    self._say(f"waiting for {self.path} (no event log there yet)")
                for view, status in zip(self.views, self.statuses, strict=True):
                    sink = view.sink
                    if sink is not None and before.get(view.name) is not sink and view is self.chief:
                        self._say(self.rendering.plain_line(sink))  # where the run stands, once per (re)read
                    text = status.state + (f": {status.stop}" if status.state == STOPPED and status.stop else "")
                    if status.state in (CRASHED, DEAD) and status.error:
                        text += f": {status.error}"
                    if said.get(view.name) != text:  # each change of state, once
                        self._say(f"{view.name}: {text}")
                    said[view.name] = text
                self._summaries(self._close_ended())  # the chief's summary, as ConsoleSink prints it at a close
                if self._ended():
                    break
                time.sleep(self.interval)
        finally:
            self._summaries([view for view in self.views if view.close()])
        return EXIT_STATUS[self.state]
