"""A sink that needs the step, not values (``self.keys = frozenset()``): called at its steps, it
adds no key to any fetch (``StopAtStepSink`` is one by itself; ``hookbus.from_hooks`` narrows its
checkpoint sink likewise, so that a summary op runs only on the summary steps)."""

from __future__ import annotations

import hookbus
from hookbus import EventBus
from hookbus.sink_api import Sink
from hookbus.sinks import StopAtStepSink
from hookbus.testing import FakeClock, ScriptedPublisher


class Steps(Sink):
    def __init__(self, every_n_steps: int) -> None:
        super().__init__(every_n_steps=every_n_steps)
        self.keys = frozenset()
        self.seen: list[tuple[int, list[str]]] = []

    def on_after_run(self, event: hookbus.Event) -> None:
        self.seen.append((event.step, sorted(event.values)))


def test_a_step_only_sink_is_called_at_its_steps_and_fetches_nothing() -> None:
    bus = EventBus(clock=FakeClock())
    steps = bus.attach(Steps(every_n_steps=3))
    loss: list[tuple[int, float]] = []
    bus.on("after_run", lambda e: loss.append((e.step, e.values["loss"])), keys=["loss"], every_n_steps=2)
    publisher = ScriptedPublisher(bus, keys=["loss", "summary"])
    with bus:
        publisher.run({"loss": float(s), "summary": b"x"} for s in range(1, 7))
    # Step 3 fetched nothing at all; step 6 fetched what the loss function needs, and the sink saw it.
    assert publisher.fetched == [(2, ("loss",)), (3, ()), (4, ("loss",)), (6, ("loss",))]
    assert steps.seen == [(3, []), (6, ["loss"])]
    assert loss == [(2, 2.0), (4, 4.0), (6, 6.0)]


def test_a_stop_at_step_sink_alone_fetches_no_value_at_its_step() -> None:
    bus = EventBus(clock=FakeClock())
    stop = bus.attach(StopAtStepSink(last_step=4))
    assert stop.keys == frozenset()
    publisher = ScriptedPublisher(bus, keys=["loss", "summary"])
    with bus:
        publisher.run({"loss": float(s), "summary": b"x"} for s in range(1, 7))
    # Due at step 4 alone, it asked for no value (a summary op would not run there) and stopped there.
    assert publisher.fetched == [(4, ())]
    assert bus.stop_reason is not None
    assert "step 4" in bus.stop_reason
