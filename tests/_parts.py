"""Plain collaborators for the core's parts, assembled without a bus (tests of the parts alone)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import blinker

from hookbus._bus._dispatch import Dispatcher
from hookbus._bus._roster import Roster
from hookbus._bus._state import RunState
from hookbus._bus._stops import Stops
from hookbus._bus._subscription import Subscriber
from hookbus._contract._events import SIGNAL_DOCS
from hookbus._contract._schedule import Schedule
from hookbus._contract._sink import SIGNALS, Sink


class Parts:
    """A roster, the run's progress, the stops and a dispatcher over them: what the bus wires."""

    def __init__(self) -> None:
        self.sender = object()
        namespace = blinker.Namespace()
        self.signals = {name: namespace.signal(name, doc=SIGNAL_DOCS[name]) for name in SIGNALS}
        self.roster = Roster()
        self.state = RunState(0.0)
        self.stops = Stops(
            step=lambda: self.state.step,
            wall_clock=lambda: 100.0,
            who=lambda: self.dispatcher.current_name(),
            deliver=lambda: self.dispatcher.settle(),
        )
        self.dispatcher = Dispatcher(self.roster, self.stops, self.state, self.signals, self.sender)

    def on(
        self, name: str, signal: str, fn: Callable[[Any], Any], *, on_error: str = "raise", priority: int = 100
    ) -> Subscriber:
        record = Subscriber(
            name=name,
            handlers={signal: fn},
            schedule=Schedule(every_n_steps=1),
            keys=None,
            priority=priority,
            on_error=on_error,
            order=self.roster.next_order(),
        )
        self.roster.add(record)
        return record

    def attach(self, sink: Sink) -> Subscriber:
        record = Subscriber(
            name=sink.name,
            handlers=sink.handlers(),
            schedule=sink.schedule,
            keys=sink.keys,
            priority=sink.priority,
            on_error=sink.on_error,
            order=self.roster.next_order(),
            sink=sink,
            runs_on=sink.runs_on,
        )
        self.roster.add(record)
        return record
