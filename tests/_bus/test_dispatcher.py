"""The dispatcher alone: a roster, the run's progress and the stops as plain collaborators, no bus."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from _parts import Parts

from hookbus.sink_api import StopRequest, SubscriberError


def test_delivers_in_dispatch_order_then_to_raw_receivers() -> None:
    parts = Parts()
    order: list[str] = []
    parts.on("late", "after_run", lambda e: order.append(f"late {e}"), priority=200)
    parts.on("early", "after_run", lambda e: order.append(f"early {e}"), priority=0)
    parts.signals["after_run"].connect(lambda sender, event: order.append(f"raw {event}"), weak=False)
    parts.dispatcher.publish("after_run", 1)
    assert order == ["early 1", "late 1", "raw 1"]
    assert parts.dispatcher.due_steps == 1
    parts.dispatcher.publish("end", 2)  # nobody handles it: only after_run counts as a step
    assert parts.dispatcher.due_steps == 1


def test_a_failure_follows_its_policy_and_the_event_still_reaches_everyone(caplog: pytest.LogCaptureFixture) -> None:
    parts = Parts()
    got: list[str] = []
    reports: list[SubscriberError] = []

    def fail(event: Any) -> None:
        raise OSError("disk full")

    isolated = parts.on("isolated", "after_run", fail, on_error="isolate", priority=0)
    parts.on("raising", "after_run", fail, on_error="raise", priority=1)
    parts.on("after", "after_run", lambda e: got.append("after"), priority=2)
    parts.on("watcher", "subscriber_error", reports.append)
    with caplog.at_level(logging.ERROR, logger="hookbus"), pytest.raises(OSError, match="disk full"):
        parts.dispatcher.publish("after_run", 1)
    assert got == ["after"]  # the "raise" failure surfaced after every subscriber had the event
    assert [(r.subscriber, r.signal, r.policy) for r in reports] == [
        ("isolated", "after_run", "isolate"),
        ("raising", "after_run", "raise"),
    ]
    assert isolated.errors == 1
    assert not isolated.disabled
    assert parts.dispatcher.depth == 0


def test_stops_and_deferred_work_wait_until_the_event_reached_everyone() -> None:
    parts = Parts()
    order: list[str] = []

    def early(event: Any) -> None:
        order.append("early")
        parts.stops.request("enough")  # source: the subscriber being called
        parts.dispatcher.call_after_dispatch(lambda: order.append("deferred"))

    parts.on("early", "after_run", early, priority=0)
    parts.on("late", "after_run", lambda e: order.append("late"), priority=1)
    stops: list[StopRequest] = []
    parts.on("listener", "stop_requested", stops.append)
    parts.state.step = 7
    parts.dispatcher.publish("after_run", 7)
    assert order == ["early", "late", "deferred"]
    assert stops == [StopRequest("enough", "early", 7, 100.0)]
    parts.dispatcher.call_after_dispatch(lambda: order.append("now"))  # outside a dispatch: at once
    assert order[-1] == "now"


def test_a_failed_dispatch_publishes_neither_its_stops_nor_its_deferred_work() -> None:
    parts = Parts()
    done: list[str] = []

    def ask_then_fail(event: Any) -> None:
        parts.stops.request("stop")
        parts.dispatcher.call_after_dispatch(lambda: done.append("deferred"))
        raise RuntimeError("broken")

    parts.on("broken", "after_run", ask_then_fail)
    parts.on("listener", "stop_requested", lambda r: done.append("published"))
    with pytest.raises(RuntimeError):
        parts.dispatcher.publish("after_run", 1)
    assert done == []
    assert parts.stops.requested
    assert parts.stops.reason == "stop"
    parts.dispatcher.settle()
    assert done == []


def test_hold_keeps_work_waiting_until_release() -> None:
    parts = Parts()
    done: list[str] = []
    parts.on("saver", "after_run", lambda e: parts.dispatcher.call_after_dispatch(lambda: done.append("save")))
    parts.dispatcher.hold()
    parts.dispatcher.publish("after_run", 1)
    parts.dispatcher.publish("after_run", 2)
    assert done == []
    parts.dispatcher.release()
    assert done == ["save", "save"]


def test_publish_exception_logs_failures_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    parts = Parts()
    seen: list[BaseException] = []
    record = parts.on("bad", "exception", lambda e: (_ for _ in ()).throw(ValueError("again")))
    parts.on("good", "exception", lambda e: seen.append(e.error))
    error = KeyError("the training error")
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        parts.dispatcher.publish_exception(error)
    assert seen == [error]
    assert record.errors == 1
    assert "raised while handling 'exception'" in caplog.text


def test_reset_forgets_a_run() -> None:
    parts = Parts()
    parts.on("f", "after_run", lambda e: None)
    parts.dispatcher.publish("after_run", 1)
    parts.dispatcher.hold()
    parts.dispatcher.reset()
    assert (parts.dispatcher.due_steps, parts.dispatcher.depth, parts.dispatcher.current) == (0, 0, None)
