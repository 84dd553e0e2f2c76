"""One watched log as the dashboard shows it: a follower, the run's records, and a replay that
feeds the console sink's own state through a bus.

Each poll reads the complete lines the log gained. New records are published through a
:class:`~hookbus._publishing._replay.FollowedReplay` in follow mode (train steps, evaluations, sessions,
ends) or handed to the sink as the payloads the live bus sent (checkpoints, stops, errors, an
exception). A cut (a resume behind the steps shown, a next run in the log, a replaced or shrunk
file), a key the replay did not declare, or the first read of a log rebuilds the view from what
the run keeps (:mod:`hookbus._watch._kept`), on a new bus and sink, quietly, so the dashboard
shows each step once. Of many new train steps in one poll, the view is given only what it shows
(the last ones and each key's extremes among them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rich.console import Console

from hookbus._bus._bus import EventBus
from hookbus._contract._event_log import decode_line, parsed
from hookbus._contract._events import CheckpointSaved, ExceptionRaised, StopRequest, SubscriberError
from hookbus._contract._sink import Sink
from hookbus._publishing._replay import FollowedReplay
from hookbus._watch._follow import LogFollower
from hookbus._watch._kept import shown as shown_of
from hookbus._watch._run import RunLog, WorkerStatus, recorded_error

__all__ = ["Gate", "LogView", "MakeSink", "NotAnEventLogError"]

#: Makes the dashboard's sink: (console for its plain lines, the recorded clock, a run name).
MakeSink = Callable[[Console, Callable[[], float], str], Sink]
# The machine's samples too: the replay publishes them on the system signal (the machine line).
_PUBLISHED = frozenset({"begin", "session_created", "step", "end", "system"})
# New train steps a poll puts on the dashboard one by one (tens of microseconds each); of more
# (a fast run recorded every step), the last ones and each key's extremes among them.
_ONE_BY_ONE = 256


class NotAnEventLogError(ValueError):
    """A watched file holds a line that is not an event-log record."""


class Gate:
    """A text stream that passes writes on to ``target`` while :attr:`open` (a rebuild is quiet)."""

    def __init__(self, target: IO[str], open_: bool = True) -> None:
        self.target = target
        self.open = open_

    def write(self, text: str) -> int:
        if self.open:
            self.target.write(text)
        return len(text)

    def flush(self) -> None:
        if self.open:
            self.target.flush()


class _RecordedTotal(Sink):
    """The last step the run's sinks knew (its ``begin`` record): the dashboard's total and ETA."""

    def __init__(self, total: int) -> None:
        super().__init__(name="recorded total")
        self._total = total

    @property
    def total_steps(self) -> int | None:
        return self._total


@dataclass
class _Shown:
    """The dashboard's state for the current run: its bus, sink and replay."""

    sink: Sink
    replay: FollowedReplay
    closed: bool = False


class LogView:
    """One log, followed and shown through the console sink.

    Args:
        path: The log (it need not exist yet).
        name: How the watcher names it (``worker 1``).
        make_sink: Makes the dashboard's sink (see :data:`MakeSink`).
        out: Where its plain lines go (a :class:`Gate`; closed for a quiet log).
        clock: The watcher's monotonic clock, for the age of the newest record.
        wall_clock: The watcher's wall clock, compared with the file's mtime only when a log
            is first read (how old its newest record is: the one comparison with another host's
            clock, and only until the file grows).
    """

    def __init__(
        self,
        path: Path,
        name: str,
        make_sink: MakeSink,
        out: Gate,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.name = name
        self.run = RunLog()
        self.exists = False
        self._follower = LogFollower(path)
        self._make_sink = make_sink
        self._out = out
        self._clock = clock
        self._wall_clock = wall_clock
        self._shown: _Shown | None = None
        self._seen_at: float | None = None  # watcher's clock when the newest record arrived
        self._lines = 0  # complete lines read from the current file, for error messages

    @property
    def loud(self) -> bool:
        """Whether the sink's plain lines reach the output (a rebuild is quiet all the same)."""
        return self._out.open

    @loud.setter
    def loud(self, value: bool) -> None:
        self._out.open = value

    @property
    def sink(self) -> Sink | None:
        """The dashboard's sink for the run shown (``None`` before its first record)."""
        return None if self._shown is None else self._shown.sink

    def poll(self) -> tuple[bool, bool]:
        """Read what the log gained; (whether it gained records, whether the view was rebuilt)."""
        rebuild = gained = reset = False
        mtime: float | None = None
        while True:  # a poll reads a bounded piece: each piece is taken in, and let go, in turn
            polled = self._follower.poll()
            self.exists = polled.exists
            if polled.reset:
                self.run.clear()
                self._lines = 0
                rebuild = reset = True
            if polled.lines:
                gained, mtime = True, polled.mtime
                rebuild = self._take(polled.lines, rebuild) or rebuild
            if not polled.more:
                break
        if gained:
            now = self._clock()
            first = self._seen_at is None or reset
            lag = max(0.0, self._wall_clock() - mtime) if first and mtime is not None else 0.0
            self._seen_at = now - lag
        if rebuild:
            self._rebuild()
        return gained, rebuild

    def _take(self, lines: list[str], rebuild: bool) -> bool:
        """Take complete lines into the run; whether the view must be rebuilt. New records go
        on the dashboard as they come (its plain lines said), but of many train steps at once
        (a fast run recorded every step) only what it shows (:func:`~hookbus._watch._kept.shown`:
        the last ones, each key's extremes), far quicker than publishing each."""
        try:
            records = parsed(lines, self._lines + 1, str(self.path))
        except ValueError as error:
            raise NotAnEventLogError(str(error)) from None
        self._lines += len(lines)
        shown = self._shown
        one_by_one = not rebuild and shown is not None and not shown.closed
        if not one_by_one:  # the view is rebuilt from what the run keeps: nothing to publish now
            self.run.add_all(lines, records)
            return True
        chosen = shown_of(records, _ONE_BY_ONE) if one_by_one and len(records) > _ONE_BY_ONE else None
        for index, (line, record) in enumerate(zip(lines, records, strict=True)):
            if self.run.add(line, record):
                rebuild, one_by_one = True, False
            elif one_by_one and shown is not None and (chosen is None or index in chosen):
                decoded = decode_line(line)
                if shown.replay.knows(decoded):
                    self._apply(shown, decoded)
                else:
                    rebuild, one_by_one = True, False
        return rebuild or not one_by_one

    def age(self) -> float | None:
        """Seconds since the newest record reached the watcher (``None`` before one)."""
        return None if self._seen_at is None else max(0.0, self._clock() - self._seen_at)

    def status(self, stale_after: float | None, dead_after: float) -> WorkerStatus:
        """This log's state now (``stale_after=None``: a few of its expected intervals)."""
        age = self.age()
        threshold = self.run.stale_after() if stale_after is None else stale_after
        behind = self.run.sample_behind
        return WorkerStatus(
            name=self.name,
            state=self.run.state(age, threshold, dead_after),
            step=self.run.step,
            rate=self.run.average,
            recent=self.run.rate,
            examples_rate=self.run.examples_rate,
            outside=self.run.outside,
            age=age,
            stop=self.run.stop,
            error=self.run.error,
            host=self.run.host,
            task=self.run.task,
            machine=self.run.sample,
            notice=self.run.notice,
            sample_age=None if age is None or behind is None else age + behind,
        )

    def close(self) -> bool:
        """End the dashboard's run, quietly: its sink closes and shows how the run ended, and
        stays readable; whether it was open. Idempotent."""
        shown = self._shown
        if shown is None or shown.closed:
            return False
        shown.closed = True
        loud, self._out.open = self._out.open, False  # its summary would name the watcher's own bus's health
        try:
            shown.replay.close()
        finally:
            self._out.open = loud
        return True

    def _rebuild(self) -> None:
        self.close()
        self._shown = None
        records = self.run.records
        if not any(r["record"] in _PUBLISHED for r in records):
            return
        # The view's run takes over no signal: the watcher keeps its own Ctrl-C, and a view left
        # open leaves no handler of its run installed.
        bus = EventBus(handle_signals=False)
        replay = FollowedReplay(bus, records)
        replay.clock.now = float(records[0].get("wall_time") or 0.0)
        console = Console(file=self._out, highlight=False, color_system=None)  # type: ignore[arg-type]
        shown = _Shown(bus.attach(self._make_sink(console, replay.clock, self.name)), replay)
        total = next((r.get("total_steps") for r in records if r["record"] == "begin"), None)
        if isinstance(total, int) and total > 0:
            bus.attach(_RecordedTotal(total))
        loud, self._out.open = self._out.open, False
        try:
            shown.replay.start()
            self._shown = shown
            for record in records:
                self._apply(shown, record)
        finally:
            self._out.open = loud

    def _apply(self, shown: _Shown, record: dict[str, Any]) -> None:
        """Publish ``record`` through the replay, or hand it to the sink as its live payload."""
        kind, step = record["record"], int(record.get("step") or 0)
        if kind in _PUBLISHED:
            shown.replay.feed(record)
            return
        clock = shown.replay.clock
        clock.now = float(record.get("wall_time") or clock.now)
        if kind == "checkpoint_saved":
            shown.sink.on_checkpoint_saved(CheckpointSaved(str(record.get("path")), step, record.get("value")))
        elif kind == "stop_requested":
            reason, source = str(record.get("reason")), str(record.get("source"))
            shown.sink.on_stop_requested(StopRequest(reason, source, step, clock.now))
        elif kind == "subscriber_error":
            shown.sink.on_subscriber_error(
                SubscriberError(
                    str(record.get("subscriber")),
                    str(record.get("signal")),
                    step,
                    recorded_error(str(record.get("error"))),
                    int(record.get("count") or 1),
                    str(record.get("policy")),
                )
            )
        elif kind == "exception":
            shown.sink.on_exception(ExceptionRaised(recorded_error(str(record.get("error"))), step))
