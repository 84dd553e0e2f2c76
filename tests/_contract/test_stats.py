"""bus.stats(): each subscriber's calls, time on the training thread, writer, errors and state."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

import hookbus
from hookbus.sinks import CSVSink
from hookbus.testing import FakeClock, ScriptedPublisher


class Broken(hookbus.sink_api.Sink):
    """An observability sink that always fails."""

    def on_after_run(self, event: hookbus.Event) -> None:
        raise ValueError("disk full")


class Slow(hookbus.sink_api.Sink):
    """Takes a known time on the training thread on every due step."""

    def __init__(self, seconds: float, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.seconds = seconds

    def on_after_run(self, event: hookbus.Event) -> None:
        time.sleep(self.seconds)


def test_stats_count_due_calls_only_and_time_them(tmp_path: Path) -> None:
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(Slow(0.01, every_n_steps=10, name="slow"))
    bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=5))
    seen: list[int] = []
    bus.on("after_run", lambda e: seen.append(e.step), every_n_steps=25, name="report")
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run({"loss": 1.0 / s} for s in range(1, 101))
        during = bus.stats()
    after = bus.stats()
    slow, csv, report = (after[name] for name in ("slow", "CSVSink", "report"))
    assert (slow.kind, csv.kind, report.kind) == ("sink", "sink", "function")
    # Quiet steps are never timed: only the due steps' after_run calls count.
    assert (slow.step_calls, csv.step_calls, report.step_calls) == (10, 20, 4)
    assert after.due_steps == 20  # steps on which anything was due
    assert after.step == 100
    assert 0.01 * 10 <= slow.step_seconds < 1.0
    assert slow.mean_seconds >= 0.01
    assert slow.max_seconds >= 0.01
    assert csv.step_seconds < slow.step_seconds
    assert after.seconds_per_due_step >= slow.step_seconds / 20
    assert csv.writer is not None
    assert (csv.writer.rows, csv.writer.written, csv.writer.queued) == (20, 20, 0)  # closed: all written
    assert csv.writer.capacity == 1024
    assert csv.writer.backlog == 0.0
    live_writer = during["CSVSink"].writer
    assert live_writer is not None
    assert live_writer.rows == 20
    assert (slow.writer, report.writer) == (None, None)
    assert not any(s.errors or s.disabled for s in after.subscribers)
    assert [s.name for s in after.subscribers] == ["slow", "CSVSink", "report"]  # dispatch order


def test_stats_show_errors_and_disabled_subscribers() -> None:
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(Broken(name="isolated", every_n_steps=1))
    bus.attach(Broken(name="disabled", every_n_steps=1, on_error="disable"))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run([{"loss": 1.0}] * 5)
    stats = bus.stats()
    assert (stats["isolated"].errors, stats["isolated"].disabled, stats["isolated"].step_calls) == (5, False, 5)
    assert (stats["disabled"].errors, stats["disabled"].disabled, stats["disabled"].step_calls) == (1, True, 1)
    assert stats["disabled"].on_error == "disable"


def test_stats_are_frozen_and_start_afresh_each_run() -> None:
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(Broken(name="broken", every_n_steps=1))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run([{"loss": 1.0}] * 3)
    first = bus.stats()
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.subscribers[0].calls = 0  # type: ignore[misc]
    with bus:
        pub.run([{"loss": 1.0}] * 2)
    assert first["broken"].step_calls == 3  # a snapshot: the next run does not change it
    assert bus.stats()["broken"].step_calls == 2
    assert bus.stats()["broken"].errors == 2
    with pytest.raises(KeyError, match="no subscriber named 'nope'; the subscribers are 'broken'"):
        bus.stats()["nope"]


def test_a_checkpoint_save_deferred_after_the_dispatch_counts_for_its_sink() -> None:
    bus = hookbus.EventBus(clock=FakeClock())

    class Deferring(hookbus.sink_api.Sink):
        def on_after_run(self, event: hookbus.Event) -> None:
            self.context.defer(lambda: time.sleep(0.02))

    bus.attach(Deferring(every_n_steps=1, name="saver"))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run([{"loss": 1.0}] * 2)
    saver = bus.stats()["saver"]
    assert saver.seconds >= 0.04
    assert saver.step_seconds < 0.02  # the handler itself was quick


def test_the_health_line_names_a_failing_sink_a_slow_one_and_a_writer_falling_behind() -> None:
    from hookbus.sinks.console._health import health_items, health_summary

    def sub(
        name: str, seconds: float, errors: int = 0, writer: hookbus.WriterStats | None = None
    ) -> hookbus.SubscriberStats:
        return hookbus.SubscriberStats(
            name, "sink", "isolate", 10, seconds, seconds, 10, seconds, errors, errors > 2, writer
        )

    behind = hookbus.WriterStats(rows=1000, written=100, queued=900, capacity=1024)
    stats = hookbus.BusStats(
        step=100,
        due_steps=10,
        subscribers=(sub("quick", 0.0001), sub("slow", 0.2), sub("broken", 0.001, 3), sub("CSV", 0.0, 0, behind)),
    )
    items = dict(health_items(stats))
    assert items["sinks: 3 ok, 1 failing"] == "red"
    assert "20.11 ms per due step" in items  # (0.0001 + 0.2 + 0.001) s over 10 due steps
    assert items["most: slow 20.00 ms (slowest call 200.00 ms)"] == "bold yellow"
    assert items["errors: broken ×3 (disabled)"] == "bold red"  # each sink named once
    assert items["CSV queue 900/1024"] == "bold yellow"
    assert health_summary(stats).count("CSV") == 1
    fine = hookbus.BusStats(100, 10, (sub("quick", 0.0001),))
    assert dict(health_items(fine)) == {"sinks: 1 ok": "green", "0.01 ms per due step": "", "most: quick 0.01 ms": ""}
    assert health_summary(stats).endswith("CSV queue 900/1024 (100 rows)")


def test_stats_iterate_their_subscribers_and_are_looked_up_by_name(tmp_path: Path) -> None:
    # Issue 36: `for s in bus.stats():` raised KeyError("no subscriber named 0") (indexing by name only).
    bus = hookbus.EventBus(clock=FakeClock())
    bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=5))
    bus.on("after_run", lambda e: None, every_n_steps=2, name="report")
    with bus:
        ScriptedPublisher(bus, ["loss"]).run({"loss": 1.0} for _ in range(10))
    stats = bus.stats()
    assert [(s.name, s.step_calls) for s in stats] == [("CSVSink", 2), ("report", 5)]
    assert len(stats) == 2
    assert "report" in stats
    assert "nobody" not in stats
    assert list(stats) == list(stats.subscribers)
    with pytest.raises(TypeError, match=r"by a subscriber's name \(got 0\); iterate it"):
        stats[0]  # type: ignore[index]
    with pytest.raises(KeyError, match="no subscriber named 'nobody'; the subscribers are 'CSVSink', 'report'"):
        stats["nobody"]
