"""The machine sampled on its own clock (no TensorFlow): the ``system`` signal, its thread and its run.

Timing is never asserted: a test that needs a sample at a point publishes it with
``ScriptedPublisher.sample_system()``; one that needs the thread waits on events, with a deadline
that only bounds a failure.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

import hookbus
from hookbus.sink_api import SYSTEM_MODE, SYSTEM_NOTICE_KEY, Event, Sink
from hookbus.testing import ScriptedPublisher

THREAD = "hookbus-system-metrics"
WAIT = 60.0  # bounds a failure only


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


class Recorder(Sink):
    """Keeps every sample and the thread it came on."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[Event] = []
        self.threads: list[str] = []
        self.two = threading.Event()

    def on_system(self, event: Event) -> None:
        self.samples.append(event)
        self.threads.append(threading.current_thread().name)
        if len(self.samples) >= 2:
            self.two.set()


def test_a_sample_is_an_event_with_the_latest_step_and_mlflows_names() -> None:
    bus = hookbus.EventBus()
    recorder = bus.attach(Recorder())
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run({"loss": 1.0} for _ in range(4))
        pub.sample_system()
    first, last = recorder.samples[0], recorder.samples[-1]
    assert (first.signal, first.mode, first.step) == ("system", SYSTEM_MODE, 4)
    assert first.values[SYSTEM_NOTICE_KEY].startswith(("NVML absent", "no GPU"))  # this machine has no GPU
    assert SYSTEM_NOTICE_KEY not in last.values  # said once
    for key in (
        "system/cpu_utilization_percentage",
        "system/system_memory_usage_megabytes",
        "system/system_memory_usage_percentage",
        "system/disk_usage_megabytes",
        "system/process_cpu_utilization_percentage",
        "system/process_memory_rss_megabytes",
    ):
        assert isinstance(first.values[key], float), key
    assert len(recorder.samples) == 2  # the one asked for, and the last one as the run closed
    assert recorder.threads[-1] == THREAD  # the last one: on the sampler's thread, not this one


def test_the_thread_is_joined_at_close_and_after_an_exception() -> None:
    # Threads are told apart from other buses' (a test's implicit run stays open until exit).
    bus = hookbus.EventBus(system_metrics=3600.0)
    recorder = bus.attach(Recorder())
    pub = ScriptedPublisher(bus, ["loss"])
    before = set(_sampler_threads())
    with bus:
        pub.run([{"loss": 1.0}])
        (mine,) = set(_sampler_threads()) - before
    assert not mine.is_alive()
    assert len(recorder.samples) == 1  # the last sample, at close, though the period is an hour
    started: list[threading.Thread] = []

    def fails() -> None:
        with bus:
            pub.run([{"loss": 1.0}])
            started.extend(set(_sampler_threads()) - before)
            raise ZeroDivisionError("the training fails")

    with pytest.raises(ZeroDivisionError):
        fails()
    assert len(started) == 1
    assert not started[0].is_alive()
    assert len(recorder.samples) == 2


def test_off_by_the_argument_starts_no_thread_and_publishes_nothing() -> None:
    bus = hookbus.EventBus(system_metrics=False)
    recorder = bus.attach(Recorder())
    pub = ScriptedPublisher(bus, ["loss"])
    before = set(_sampler_threads())
    with bus:
        pub.run({"loss": 1.0} for _ in range(3))
        assert set(_sampler_threads()) - before == set()
        with pytest.raises(RuntimeError, match="no run samples the machine"):
            pub.sample_system()
    assert recorder.samples == []


def test_samples_go_on_while_a_step_is_stalled() -> None:
    """The training thread hangs at step 3 (a subscriber that waits): samples still arrive, on the
    sampler's thread, all carrying the step the bus had reached."""
    bus = hookbus.EventBus(system_metrics=0.05)
    recorder = bus.attach(Recorder())
    pub = ScriptedPublisher(bus, ["loss"])

    @bus.on("after_run")
    def stall(event: Event) -> None:
        if event.step == 3:  # the stall: this step does not end until two samples came
            assert recorder.two.wait(WAIT), "no samples while the step was stalled"

    with bus:
        pub.run({"loss": 1.0} for _ in range(5))
    stalled = recorder.samples[:2]
    assert [s.step for s in stalled] == [3, 3]
    assert set(recorder.threads) == {THREAD}
    assert recorder.samples[-1].step == 5


def test_a_failing_system_handler_is_isolated_on_the_thread_and_a_raising_one_raised_at_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Sink):
        def on_system(self, event: Event) -> None:
            raise RuntimeError("cannot show the machine")

    bus = hookbus.EventBus()
    broken = bus.attach(Broken())
    recorder = bus.attach(Recorder())
    pub = ScriptedPublisher(bus, ["loss"])
    with caplog.at_level(logging.ERROR, "hookbus"), bus:
        pub.run([{"loss": 1.0}])
        pub.sample_system()
    assert bus.stats()[broken.name].errors == 2  # isolated: the one asked for and the last one
    assert len(recorder.samples) == 2  # the others still get every sample
    assert sum("cannot show the machine" in r.getMessage() or r.exc_info is not None for r in caplog.records) == 1

    calls: list[Any] = []

    def raising(event: Event) -> None:
        calls.append(event)
        raise ValueError("stop me")

    bus2 = hookbus.EventBus()
    bus2.on("system", raising)  # on_error="raise": raised by the run's close, never on the thread
    pub2 = ScriptedPublisher(bus2, ["loss"])

    def train() -> None:
        with bus2:
            pub2.run([{"loss": 1.0}])
            pub2.sample_system()

    with pytest.raises(ValueError, match="stop me"):
        train()
    assert len(calls) == 1  # not called again after its error (not even at close)


def test_a_handler_may_ask_to_stop_and_the_training_thread_stops_at_its_next_step() -> None:
    bus = hookbus.EventBus(system_metrics=0.05)
    asked = threading.Event()

    def watchdog(event: Event) -> None:
        if threading.current_thread().name == THREAD and not asked.is_set():
            event.request_stop("memory near its limit")
            asked.set()

    bus.on("system", watchdog)
    pub = ScriptedPublisher(bus, ["loss"])

    @bus.on("after_run")
    def wait_for_the_request(event: Event) -> None:
        if event.step == 2:
            assert asked.wait(WAIT)

    with bus:
        last = pub.run({"loss": 1.0} for _ in range(100))
    assert bus.stop_reason == "memory near its limit"
    assert last < 100


def test_the_raw_signal_gets_each_sample_too() -> None:
    bus = hookbus.EventBus()
    got: list[Event] = []
    bus.system.connect(lambda sender, event: got.append(event), weak=False)
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run([{"loss": 1.0}])
    assert [e.mode for e in got] == ["system"]
