"""A function subscriber on a thread of its own (``bus.on(..., background=True)``), and what a run's
close reports of background work: losses at the close deadline, a background write that failed.

Issue 47, item 4. Counted with events and barriers, never timed: "training is not held" is a
training that ends while the function still holds its first event.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import hookbus
from hookbus.sink_api import Event, Sink, SubscriberError, WriterKit, WriterWarning
from hookbus.sinks import ConsoleSink, CSVSink
from hookbus.testing import ScriptedPublisher

_WAIT = 60.0  # a bound on waits for another thread, so that a broken build fails instead of hanging


class Gate:
    """A function that holds its first event until released, recording every event it gets."""

    def __init__(self, *, hold: bool = True) -> None:
        self.steps: list[int] = []
        self.threads: list[threading.Thread] = []  # held: a thread's ident may be reused after it ends
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def __call__(self, event: Event) -> None:
        if threading.current_thread() not in self.threads:
            self.threads.append(threading.current_thread())
        self.entered.set()
        assert self.release.wait(_WAIT), "the test never released the gate"
        self.steps.append(event.step)


@pytest.fixture
def gates() -> Iterator[list[Gate]]:
    """Gates a test makes; each released at the end, so that no thread stays held."""
    made: list[Gate] = []
    yield made
    for gate in made:
        gate.release.set()


def _gate(gates: list[Gate], *, hold: bool = True) -> Gate:
    gate = Gate(hold=hold)
    gates.append(gate)
    return gate


def _written(bus: hookbus.EventBus, name: str, at_least: int) -> Callable[[int], dict[str, float]]:
    """Values for a scripted step that first wait until ``name``'s thread delivered ``at_least``
    events (a barrier: what that thread did is then done, whatever the machine's speed)."""

    def values(step: int) -> dict[str, float]:
        done = threading.Event()
        while not done.wait(0.005):
            writer = bus.stats()[name].writer
            if writer is not None and writer.written is not None and writer.written >= at_least:
                done.set()
            assert step < 10_000
        return {"loss": 1.0 / step}

    return values


# -- arguments -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"background": "yes"}, r"background must be True or False \(got 'yes'\)"),
        ({"background": True, "queue_size": 0}, r"queue_size must be a positive int \(got 0\)"),
        ({"background": True, "close_deadline": -1}, r"close_deadline must be a positive finite number"),
        ({"background": True, "close_deadline": float("inf")}, r"close_deadline must be a positive finite"),
        ({"queue_size": 8}, r"queue_size=8 apply to a subscriber on a thread of its own; pass background=True"),
        ({"close_deadline": 2.0}, r"close_deadline=2.0 apply to .*pass background=True too"),
    ],
)
def test_bad_thread_options_fail_when_subscribing_naming_the_value(kwargs: dict[str, Any], message: str) -> None:
    bus = hookbus.EventBus()
    with pytest.raises(ValueError, match=message):
        bus.on("after_run", lambda e: None, **kwargs)
    assert bus.subscribers == []  # nothing half-subscribed


def test_begin_cannot_run_off_the_training_thread() -> None:
    with pytest.raises(ValueError, match=r"background=True is not for 'begin': a failure at begin must stop"):
        hookbus.EventBus().on("begin", lambda e: None, background=True)


# -- not holding training ------------------------------------------------------------------------
def test_training_ends_while_the_function_still_holds_its_first_event(gates: list[Gate]) -> None:
    bus = hookbus.EventBus()
    gate = _gate(gates)
    bus.on("after_run", gate, name="notify", background=True)
    with bus:
        last = ScriptedPublisher(bus, ["loss"]).run({"loss": 1.0 / s} for s in range(1, 21))
        # Training has run all 20 steps, and the function has not finished even the first one.
        assert gate.entered.wait(_WAIT)
        assert last == 20
        assert gate.steps == []
        held = bus.stats()["notify"].writer
        assert held is not None
        assert (held.rows, held.written, held.queued, held.capacity, held.lost) == (20, 0, 20, 1024, 0)
        gate.release.set()  # the server answers: what waits is delivered before the run closes
    assert gate.steps == list(range(1, 21))  # every event, in order
    assert len(gate.threads) == 1
    assert gate.threads[0] is not threading.current_thread()
    stats = bus.stats()["notify"]
    assert stats.writer is not None
    assert (stats.writer.rows, stats.writer.written, stats.writer.queued, stats.writer.lost) == (20, 20, 0, 0)
    assert (stats.errors, stats.failed, stats.step_calls) == (0, False, 20)


def test_a_full_queue_blocks_training_and_drops_nothing(gates: list[Gate]) -> None:
    bus = hookbus.EventBus()
    gate = _gate(gates)
    bus.on("after_run", gate, name="notify", background=True, queue_size=2)
    failures: list[BaseException] = []

    def train() -> None:
        try:
            with bus:
                ScriptedPublisher(bus, ["loss"]).run({"loss": 1.0} for _ in range(10))
        except BaseException as error:  # surfaced by the assertions below
            failures.append(error)

    trainer = threading.Thread(target=train)
    trainer.start()
    assert gate.entered.wait(_WAIT)
    # While the function holds step 1, the training thread can put at most two more: it waits.
    trainer.join(0.2)
    assert trainer.is_alive()
    gate.release.set()
    trainer.join(_WAIT)
    assert not trainer.is_alive()
    assert failures == []
    assert gate.steps == list(range(1, 11))
    writer = bus.stats()["notify"].writer
    assert writer is not None
    assert writer.held is not None
    assert (writer.rows, writer.written, writer.lost, writer.capacity) == (10, 10, 0, 2)
    assert writer.held >= 1  # it blocked (counted), and nothing was dropped


def test_without_the_option_the_function_runs_on_the_training_thread(gates: list[Gate]) -> None:
    bus = hookbus.EventBus()
    gate = _gate(gates, hold=False)
    bus.on("after_run", gate, name="inline")
    with bus:
        ScriptedPublisher(bus, ["loss"]).run({"loss": 1.0} for _ in range(5))
        assert gate.steps == [1, 2, 3, 4, 5]  # delivered before each step returned
    assert gate.threads == [threading.current_thread()]
    assert bus.stats()["inline"].writer is None


# -- the close deadline ----------------------------------------------------------------------------
def test_the_close_deadline_counts_what_the_function_never_received(
    gates: list[Gate], recwarn: pytest.WarningsRecorder
) -> None:
    screen = io.StringIO()
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(Console(file=screen, width=300), live=False))
    gate = _gate(gates)  # a server that never answers
    bus.on("after_run", gate, name="notify", background=True, close_deadline=0.2, on_error="isolate")
    with bus:
        ScriptedPublisher(bus, ["loss"]).run({"loss": 1.0 / s} for s in range(1, 6))
        assert gate.entered.wait(_WAIT)
    (warned,) = [str(w.message) for w in recwarn if issubclass(w.category, WriterWarning)]
    assert warned.startswith("notify: 5 events not delivered within the 0.2 s close deadline of its own thread")
    notify = bus.stats()["notify"]
    assert notify.writer is not None
    assert (notify.writer.rows, notify.writer.written, notify.writer.lost) == (5, 0, 5)
    assert notify.failed  # never "ok"
    (summary,) = [line for line in screen.getvalue().splitlines() if line.startswith("  sinks: ")]
    assert summary.startswith("  sinks: 1 ok, 1 failing")
    assert re.search(r"notify [^|]*\b5 events not delivered", summary), summary  # its place depends on its cost
    gate.release.set()  # the held call returns; the thread delivers nothing more after close
    gate.entered.clear()
    assert not gate.entered.wait(0.2)
    assert gate.steps == [1]


# -- errors follow the policy ----------------------------------------------------------------------
def _failing_at(steps: set[int], seen: list[int]) -> Callable[[Event], None]:
    def notify(event: Event) -> None:
        seen.append(event.step)
        if event.step in steps:
            raise ConnectionError(f"webhook refused step {event.step}")

    return notify


def test_isolated_errors_are_counted_reported_and_the_function_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    bus = hookbus.EventBus()
    seen: list[int] = []
    reports: list[SubscriberError] = []
    bus.on("after_run", _failing_at({2, 6}, seen), name="notify", background=True, on_error="isolate")
    bus.on("subscriber_error", reports.append, name="watcher")
    pub = ScriptedPublisher(bus, ["loss"])
    with caplog.at_level(logging.ERROR, logger="hookbus"), bus:
        # Step 3 waits until the thread has handled step 2 (and failed): its call reports it. Without
        # that barrier the report would fall on step 3's or step 4's call, as the machine's pace has it.
        pub.run(_written(bus, "notify", 2) if s == 3 else {"loss": 1.0} for s in range(1, 7))
    assert seen == [1, 2, 3, 4, 5, 6]  # every event, also after the errors
    notify = bus.stats()["notify"]
    assert (notify.errors, notify.disabled, notify.failed) == (2, False, True)
    assert [(r.subscriber, r.signal, r.step, str(r.error)) for r in reports] == [
        ("notify", "after_run", 3, "webhook refused step 2"),  # reported on the training thread at its next call
        ("notify", "close", 6, "webhook refused step 6"),  # raised after its last call: reported at close
    ]
    assert "raised on the own thread of subscriber 'notify' while handling the event of step 2" in (
        reports[0].error.__notes__
    )
    assert bus.stop_reason is None  # training was never stopped by it


def test_raise_ends_training_at_the_next_call_with_the_functions_own_error() -> None:
    bus = hookbus.EventBus()
    seen: list[int] = []
    bus.on("after_run", _failing_at({3}, seen), name="notify", background=True)  # on_error="raise"
    pub = ScriptedPublisher(bus, ["loss"])
    with pytest.raises(ConnectionError, match="webhook refused step 3") as raised, bus:
        pub.run(_written(bus, "notify", 3) if s == 4 else {"loss": 1.0} for s in range(1, 11))
    assert bus.step == 4  # the step whose call found the error: training ended there
    assert seen == [1, 2, 3]  # not called again after its error
    assert "while handling the event of step 3" in raised.value.__notes__[0]
    notify = bus.stats()["notify"]
    assert notify.errors == 1
    assert notify.writer is not None
    assert notify.writer.lost == 1  # step 4's event, handed over by the call that raised


def test_raise_after_the_last_call_is_raised_by_the_close() -> None:
    bus = hookbus.EventBus()
    bus.on("after_run", _failing_at({3}, []), name="notify", background=True)
    with pytest.raises(ConnectionError, match="webhook refused step 3"), bus:
        ScriptedPublisher(bus, ["loss"]).run({"loss": 1.0} for _ in range(3))
    assert bus.stats()["notify"].errors == 1


def test_disable_stops_calling_the_function_after_its_error() -> None:
    bus = hookbus.EventBus()
    seen: list[int] = []
    bus.on("after_run", _failing_at({2}, seen), name="notify", background=True, on_error="disable")
    with bus:
        ScriptedPublisher(bus, ["loss"]).run(
            _written(bus, "notify", 2) if s == 3 else {"loss": 1.0} for s in range(1, 9)
        )
    notify = bus.stats()["notify"]
    assert seen == [1, 2]
    assert (notify.errors, notify.disabled, notify.step_calls) == (1, True, 3)  # disabled at step 3's call
    assert notify.writer is not None
    assert (notify.writer.written, notify.writer.lost) == (2, 1)  # step 3's event was passed over


def test_a_stop_requested_on_the_thread_is_acted_on_by_the_training_thread() -> None:
    bus = hookbus.EventBus()
    stops: list[tuple[int, str]] = []
    asked = threading.Event()  # set once step 2 has run: the stop cannot be seen before step 3

    def notify(event: Event) -> None:
        if event.step == 2:
            assert asked.wait(_WAIT)
            event.request_stop("the on-call engineer said stop")

    def step_3(step: int) -> dict[str, float]:
        asked.set()
        return _written(bus, "notify", 2)(step)

    bus.on("after_run", notify, name="notify", background=True)
    bus.on("stop_requested", lambda stop: stops.append((threading.get_ident(), stop.source)), name="seen")
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run(step_3 if s == 3 else {"loss": 1.0} for s in range(1, 11))
    assert pub.step == 3  # recorded on the thread; the training thread stopped at its next step
    assert bus.stop_reason == "the on-call engineer said stop"
    assert [who for who, _ in stops] == [threading.get_ident()]  # published on the training thread
    assert stops[0][1].startswith("thread hookbus-writer[notify]")


def test_a_second_run_starts_a_fresh_thread_with_fresh_counts(gates: list[Gate]) -> None:
    bus = hookbus.EventBus()
    gate = _gate(gates, hold=False)
    bus.on("after_run", gate, name="notify", background=True)
    for _ in range(2):
        with bus:
            ScriptedPublisher(bus, ["loss"]).run({"loss": 1.0} for _ in range(3))
        writer = bus.stats()["notify"].writer
        assert writer is not None
        assert (writer.rows, writer.written) == (3, 3)
    assert gate.steps == [1, 2, 3, 1, 2, 3]
    assert len(gate.threads) == 2


# -- a sink's background write that fails at close ---------------------------------------------------
class FullDiskLines(Sink):
    """JSON lines through the writer kit into ``/dev/full``: every write is taken into the file's
    buffer and the flush at close fails with ENOSPC, as on a disk that filled during the run."""

    def __init__(self, path: str) -> None:
        super().__init__(every_n_steps=1)
        self.path = path
        self.output = WriterKit[str](self.name, flush_secs=3600.0)

    def on_begin(self, event: Event) -> None:
        if not self.output.writing:
            file = open(self.path, "a")  # noqa: SIM115 - closed by the writer's thread
            self.output.start(file.write, file.flush, file.close, target=repr(self.path))

    def on_after_run(self, event: Event) -> None:
        self.output.put(json.dumps({"step": event.step}) + "\n")

    def writer_stats(self) -> hookbus.WriterStats | None:
        return self.output.stats()

    def close(self) -> None:
        self.output.close()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_background_write_that_fails_at_close_counts_in_stats_and_the_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    screen = io.StringIO()
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(Console(file=screen, width=300), live=False))  # closes last, whatever its place
    bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=1))
    bus.attach(FullDiskLines("/dev/full"))
    with caplog.at_level(logging.ERROR, logger="hookbus"), bus:
        ScriptedPublisher(bus, ["loss"]).run({"loss": 1.0 / s} for s in range(1, 6))
    lines = bus.stats()["FullDiskLines"]
    assert lines.errors == 1  # 19d8f43: 0 after the summary said "sinks: 3 ok"
    assert lines.failed
    assert lines.writer is not None
    assert lines.writer.rows == 5
    printed = screen.getvalue()
    (summary,) = [line for line in printed.splitlines() if line.startswith("  sinks: ")]
    assert summary.startswith("  sinks: 2 ok, 1 failing")
    assert "errors: FullDiskLines ×1" in summary
    assert "error in FullDiskLines on close at step 5: WriterError: background write failed (OSError" in printed
    assert "No space left on device" in printed
    assert any("closing 'FullDiskLines' failed" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "m.csv").read_text().count("\n") == 6  # the healthy sink wrote everything


# -- the footer: the slowest call, not only the mean ---------------------------------------------------
def test_the_health_line_shows_each_slow_subscribers_slowest_call() -> None:
    from hookbus.sinks.console._health import health_items, health_summary

    def sub(name: str, seconds: float, slowest: float) -> hookbus.SubscriberStats:
        return hookbus.SubscriberStats(name, "function", "raise", 10, seconds, slowest, 10, seconds, 0, False, None)

    # The notifier: one 2 s call among fast ones, 218 ms per due step on average.
    stats = hookbus.BusStats(
        100, 10, (sub("notify", 2.18, 2.0), sub("spiky", 0.006, 0.06), sub("quick", 0.0001, 0.00002))
    )
    items = dict(health_items(stats))
    assert items["most: notify 218.00 ms (slowest call 2.00 s)"] == "bold yellow"
    assert items["slowest call: spiky 60.00 ms"] == "bold yellow"
    assert "quick" not in health_summary(stats)


def test_a_real_run_shows_the_call_that_held_a_step() -> None:
    stall = threading.Event()
    screen = io.StringIO()
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(Console(file=screen, width=300), live=False))

    @bus.on("after_run", name="notify")
    def notify(event: Event) -> None:
        if event.step == 7:
            stall.wait(0.3)  # one slow call: at least 0.3 s, whatever the machine

    with bus:
        ScriptedPublisher(bus, ["loss"]).run({"loss": 1.0} for _ in range(20))
    assert bus.stats()["notify"].max_seconds >= 0.3
    (summary,) = [line for line in screen.getvalue().splitlines() if line.startswith("  sinks: ")]
    assert "notify" in summary
    assert "slowest call" in summary


def test_disconnecting_ends_its_thread_after_delivering_what_waits(gates: list[Gate]) -> None:
    bus = hookbus.EventBus()
    gate = _gate(gates)
    subscription = bus.on("after_run", gate, name="notify", background=True)
    assert [s.background for s in bus.subscribers] == [True]
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(3):
            pub.advance({"loss": 1.0})
        assert gate.entered.wait(_WAIT)
        gate.release.set()
        subscription.disconnect()  # within the run: its queue drains now, its thread ends
        assert gate.steps == [1, 2, 3]
        (thread,) = gate.threads
        assert not thread.is_alive()
        pub.advance({"loss": 1.0})
        pub.end()
    assert gate.steps == [1, 2, 3]
