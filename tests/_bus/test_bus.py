"""The bus, driven by hookbus.testing (no TensorFlow): signals, order, errors, stop, run scope, planning."""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import blinker
import pytest

import hookbus
from hookbus import Event, EventBus, UnknownKeyError
from hookbus.sink_api import SIGNALS, Sink, StopRequest, SubscriberError
from hookbus.testing import FakeClock, ScriptedPublisher

if TYPE_CHECKING:
    from typing import assert_type


def make(clock: FakeClock, keys: tuple[str, ...] = ("loss", "acc")) -> tuple[EventBus, ScriptedPublisher]:
    bus = EventBus(clock=clock, wall_clock=lambda: 1234.5)
    return bus, ScriptedPublisher(bus, keys=keys)


def run(bus: EventBus, pub: ScriptedPublisher, steps: int, values: Any = None) -> int:
    with bus:
        return pub.run([values or {k: 1.0 for k in pub.core.keys}] * steps)


class Recorder(Sink):
    """Logs every signal it gets, and every close."""

    def __init__(self, log: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.log = log
        self.closed = 0

    def on_after_run(self, event: Event) -> None:
        self.log.append((self.name, "after_run", event.step))

    def on_exception(self, payload: hookbus.sink_api.ExceptionRaised) -> None:
        self.log.append((self.name, "exception", payload.error))

    def on_end(self, event: Event) -> None:
        self.log.append((self.name, "end", event.step))

    def close(self) -> None:
        self.closed += 1
        self.log.append((self.name, "close"))


# -- signals and events -----------------------------------------------------------------------
def test_signals_are_blinker_signals_of_the_bus_own_namespace() -> None:
    bus, other = EventBus(), EventBus()
    for name in SIGNALS:
        sig = getattr(bus, name)
        assert isinstance(sig, blinker.NamedSignal)
        assert sig.name == name
        assert bus.namespace[name] is sig
        assert sig is not getattr(other, name)
        assert sig is not blinker.signal(name)
        assert sig.__doc__
    for name in ("begin", "after_run", "session_created", "stop_requested", "subscriber_error", "exception"):
        assert name in SIGNALS


def test_raw_blinker_receivers_get_published_events(clock: FakeClock) -> None:
    bus, pub = make(clock)
    got: list[tuple[Any, int]] = []

    def receiver(sender: Any, event: Event) -> None:
        got.append((sender, event.step))

    bus.after_run.connect(receiver)
    bus.on("after_run", lambda e: None, every_n_steps=2)
    run(bus, pub, 4)
    assert got == [(bus, 2), (bus, 4)]


def test_events_are_immutable_and_carry_step_mode_values_and_times(clock: FakeClock) -> None:
    bus, pub = make(clock)
    seen: list[Event] = []
    bus.on("after_run", seen.append, every_n_steps=1)
    clock.tick = 0.5
    run(bus, pub, 2, {"loss": 3.0, "acc": 0.5})
    event = seen[-1]
    assert (event.signal, event.step, event.mode) == ("after_run", 2, "train")
    assert dict(event.values) == {"loss": 3.0, "acc": 0.5}
    assert event.wall_time == 1234.5
    assert event.elapsed > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.step = 7  # type: ignore[misc]
    with pytest.raises(TypeError):
        event.values["loss"] = 0.0  # type: ignore[index]


def test_request_stop_on_a_detached_event_explains() -> None:
    with pytest.raises(RuntimeError, match="not attached to a bus"):
        Event("after_run", 1).request_stop("why")


# -- order ------------------------------------------------------------------------------------
def test_subscribers_run_by_priority_then_registration(clock: FakeClock) -> None:
    bus, pub = make(clock)
    order: list[str] = []

    def subscriber(name: str) -> Callable[[Event], None]:
        return lambda e: order.append(name)

    bus.on("after_run", subscriber("late-a"), priority=100)
    bus.on("after_run", subscriber("first-a"), priority=0)
    bus.attach(Recorder([], name="sink-50", priority=50))
    bus.on("after_run", subscriber("first-b"), priority=0)
    bus.on("after_run", subscriber("late-b"), priority=100)
    bus.on("after_run", subscriber("negative"), priority=-5)
    run(bus, pub, 1)
    assert order == ["negative", "first-a", "first-b", "late-a", "late-b"]
    assert [s.name for s in bus.subscribers][3] == "sink-50"


# -- errors -----------------------------------------------------------------------------------
class Boom(Exception):
    pass


def test_isolate_logs_once_reports_each_time_and_keeps_calling(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    bus, pub = make(clock)
    calls: list[int] = []
    after: list[int] = []
    reports: list[SubscriberError] = []
    raw_reports: list[SubscriberError] = []

    def failing(event: Event) -> None:
        calls.append(event.step)
        raise Boom(f"step {event.step}")

    bus.on("after_run", failing, on_error="isolate", priority=0, name="failing")
    bus.on("after_run", lambda e: after.append(e.step), priority=10)
    bus.on("subscriber_error", reports.append)
    bus.subscriber_error.connect(lambda sender, event: raw_reports.append(event), weak=False)
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        run(bus, pub, 3)
    assert calls == [1, 2, 3]
    assert after == [1, 2, 3]
    assert [(r.subscriber, r.step, r.count, r.policy) for r in reports] == [
        ("failing", 1, 1, "isolate"),
        ("failing", 2, 2, "isolate"),
        ("failing", 3, 3, "isolate"),
    ]
    assert all(isinstance(r.error, Boom) for r in reports)
    assert raw_reports == reports
    logged = [r for r in caplog.records if "failing" in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].exc_info is not None
    assert logged[0].exc_info[0] is Boom


def test_disable_reports_and_stops_calling(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    bus, pub = make(clock)
    calls: list[int] = []
    after: list[int] = []
    reports: list[SubscriberError] = []

    def failing(event: Event) -> None:
        calls.append(event.step)
        raise Boom

    bus.on("after_run", failing, on_error="disable", name="failing")
    bus.on("after_run", lambda e: after.append(e.step))
    bus.on("subscriber_error", reports.append)
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        run(bus, pub, 4)
    assert calls == [1]
    assert after == [1, 2, 3, 4]
    assert [(r.count, r.policy) for r in reports] == [(1, "disable")]
    assert any("disabled" in r.getMessage() and r.exc_info for r in caplog.records)


def test_raise_lets_the_others_have_the_event_then_propagates_unchanged(clock: FakeClock) -> None:
    bus, pub = make(clock)
    error = Boom("the one")
    after: list[int] = []

    def failing(event: Event) -> None:
        if event.step == 2:
            raise error

    bus.on("after_run", failing, priority=0)  # on_error="raise" is the default for functions
    bus.on("after_run", lambda e: after.append(e.step), priority=100)
    with pytest.raises(Boom) as excinfo, bus:
        pub.run([{"loss": 1.0, "acc": 1.0}] * 5)
    assert excinfo.value is error
    assert after == [1, 2]


def test_error_policy_defaults() -> None:
    bus = EventBus()
    bus.on("after_run", lambda e: None)
    assert [s.on_error for s in bus.subscribers] == ["raise"]
    assert Sink().on_error == "isolate"
    with pytest.raises(ValueError, match=r"on_error must be one of .*\(got 'ignore'\)"):
        bus.on("after_run", lambda e: None, on_error="ignore")


def test_lambdas_and_closures_are_held_strongly(clock: FakeClock) -> None:
    bus, pub = make(clock)
    got: list[str] = []

    def subscribe_closure() -> None:
        prefix = "closure"

        def inner(event: Event) -> None:
            got.append(f"{prefix}{event.step}")

        bus.on("after_run", inner)

    subscribe_closure()
    bus.on("after_run", lambda e: got.append(f"lambda{e.step}"))
    bus.on("end", lambda e: got.append("end"))
    gc.collect()
    run(bus, pub, 1)
    assert got == ["closure1", "lambda1", "end"]


# -- subscriptions ----------------------------------------------------------------------------
def test_subscription_is_callable_a_context_manager_and_disconnects(clock: FakeClock) -> None:
    bus, pub = make(clock)
    got: list[str] = []

    @bus.on("after_run")
    def report(event: Event) -> str:
        got.append(f"decorated{event.step}")
        return "returned"

    assert isinstance(report, hookbus.Subscription)
    assert report(Event("after_run", 9)) == "returned"
    got.clear()

    with bus.on("after_run", lambda e: got.append(f"temporary{e.step}")) as temporary:
        assert temporary.connected
        run(bus, pub, 1)
    assert not temporary.connected
    assert got == ["decorated1", "temporary1"]

    got.clear()
    pub2 = ScriptedPublisher(bus, keys=["loss", "acc"])
    run(bus, pub2, 1)
    assert got == ["decorated1"]

    report.disconnect()
    report.disconnect()  # harmless twice
    got.clear()
    run(bus, ScriptedPublisher(bus, keys=["loss", "acc"]), 1)
    assert got == []


def test_attach_detach_and_their_errors(clock: FakeClock) -> None:
    bus, pub = make(clock)
    log: list[Any] = []
    sink = Recorder(log, name="rec")
    assert bus.attach(sink) is sink
    with pytest.raises(ValueError, match="already attached"):
        bus.attach(sink)
    with pytest.raises(TypeError, match="hookbus.sink_api.Sink"):
        bus.attach(lambda e: None)  # type: ignore[type-var]
    assert bus.sinks == [sink]
    bus.detach(sink)
    with pytest.raises(ValueError, match="not attached"):
        bus.detach(sink)
    run(bus, pub, 2)
    assert log == []

    bus.attach(sink)
    with bus:
        pub.begin()
        with pytest.raises(RuntimeError, match="after the run began"):
            bus.attach(Recorder(log, name="late"))
        with pytest.raises(RuntimeError, match="after the run began"):
            bus.on("after_run", lambda e: None)
        pub.session(0)
        pub.advance({"loss": 1.0, "acc": 1.0})
        pub.end()
    assert ("rec", "after_run", 1) in log
    assert [s.name for s in bus.sinks] == ["rec"]


def test_sink_handlers_are_the_overridden_on_methods() -> None:
    class Partial(Sink):
        def on_after_run(self, event: Event) -> None:
            pass

        def on_session_created(self, event: Event) -> None:
            pass

        def helper(self) -> None:
            pass

    class Child(Partial):
        def on_end(self, event: Event) -> None:
            pass

    assert Sink().handlers() == {}
    assert set(Partial().handlers()) == {"after_run", "session_created"}
    child = Child()
    handlers = child.handlers()
    assert set(handlers) == {"after_run", "session_created", "end"}
    assert handlers["end"].__self__ is child  # type: ignore[attr-defined]


def test_sink_default_schedule_and_keys() -> None:
    class Every10(Sink):
        default_schedule = hookbus.sink_api.Schedule(every_n_steps=10)

    assert Every10().schedule == hookbus.sink_api.Schedule(every_n_steps=10)
    assert Every10(every_n_secs=5).schedule == hookbus.sink_api.Schedule(every_n_secs=5)
    assert Every10(keys="loss").keys == frozenset({"loss"})
    with pytest.raises(ValueError, match="keys"):
        Sink(keys=[""])


# -- stop -------------------------------------------------------------------------------------
def test_request_stop_ends_that_step_keeps_first_reason_and_publishes_after_the_event(clock: FakeClock) -> None:
    bus, pub = make(clock)
    log: list[Any] = []

    def stopper(reason: str) -> Callable[[Event], None]:
        def handler(event: Event) -> None:
            log.append((reason, event.step))
            if event.step == 3:
                event.request_stop(reason)

        return handler

    bus.on("after_run", stopper("first"), priority=0, name="first-stopper")
    bus.on("after_run", stopper("second"), priority=1, name="second-stopper")
    bus.on("after_run", lambda e: log.append(("late", e.step)), priority=100)
    bus.on("stop_requested", lambda r: log.append(("stop", r.reason, r.source, r.step)))
    last = run(bus, pub, 10)
    assert last == 3
    assert bus.stop_reason == "first"
    assert log[-5:] == [
        ("first", 3),
        ("second", 3),
        ("late", 3),
        ("stop", "first", "first-stopper", 3),
        ("stop", "second", "second-stopper", 3),
    ]


def test_stop_request_payload_type(clock: FakeClock) -> None:
    bus, pub = make(clock)
    got: list[StopRequest] = []
    bus.on("stop_requested", got.append)
    bus.on("after_run", lambda e: e.request_stop("enough"))
    run(bus, pub, 5)
    assert [(r.reason, r.step) for r in got] == [("enough", 1)]
    assert got[0].wall_time == 1234.5
    with pytest.raises(ValueError, match="reason"):
        bus.request_stop("")


# -- run scope --------------------------------------------------------------------------------
@pytest.mark.parametrize("error_type", [Boom, KeyboardInterrupt])
def test_with_bus_publishes_exception_then_closes_every_sink_once(
    clock: FakeClock, error_type: type[BaseException]
) -> None:
    bus, pub = make(clock)
    log: list[Any] = []
    sinks = [bus.attach(Recorder(log, name=f"s{i}")) for i in range(3)]
    raw: list[Any] = []
    bus.exception.connect(lambda sender, event: raw.append(event.error), weak=False)
    error = error_type("stop here")

    def crash() -> None:
        with bus:
            pub.begin()
            pub.session(0)
            pub.advance({"loss": 1.0, "acc": 1.0})
            raise error

    with pytest.raises(error_type) as excinfo:
        crash()
    assert excinfo.value is error
    assert raw == [error]
    assert [s.closed for s in sinks] == [1, 1, 1]
    exceptions = [i for i, item in enumerate(log) if item[1] == "exception"]
    closes = [i for i, item in enumerate(log) if item[1] == "close"]
    assert len(exceptions) == 3
    assert max(exceptions) < min(closes)
    assert all(item[2] is error for item in log if item[1] == "exception")
    bus.close()  # idempotent
    assert [s.closed for s in sinks] == [1, 1, 1]


def test_clean_exit_closes_once_and_publishes_no_exception(clock: FakeClock) -> None:
    bus, pub = make(clock)
    log: list[Any] = []
    sink = bus.attach(Recorder(log, name="s"))
    with bus:
        pub.run([{"loss": 1.0, "acc": 1.0}] * 2)
        bus.close()  # an explicit close inside the block is not repeated on exit
    assert sink.closed == 1
    assert not any(item[1] == "exception" for item in log)
    assert log[-2:] == [("s", "end", 2), ("s", "close")]


def test_a_failing_close_does_not_keep_the_others_open(clock: FakeClock) -> None:
    bus, pub = make(clock)

    class BadClose(Recorder):
        def close(self) -> None:
            super().close()
            raise Boom("close failed")

    log: list[Any] = []
    bad = bus.attach(BadClose(log, name="bad", on_error="raise"))
    good = bus.attach(Recorder(log, name="good"))
    with pytest.raises(Boom, match="close failed"), bus:
        pub.run([{"loss": 1.0}])
    assert (bad.closed, good.closed) == (1, 1)


def test_sigterm_inside_with_bus_is_a_stop_request_and_the_handler_is_restored(clock: FakeClock) -> None:
    bus, pub = make(clock)
    log: list[Any] = []
    sink = bus.attach(Recorder(log, name="s"))
    stops: list[StopRequest] = []
    bus.on("stop_requested", stops.append)

    def preempt(event: Event) -> None:
        if event.step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    bus.on("after_run", preempt)
    previous_calls: list[int] = []

    def previous(signum: int, frame: Any) -> None:
        previous_calls.append(signum)

    original = signal.signal(signal.SIGTERM, previous)
    try:
        with bus:
            last = pub.run([{"loss": 1.0, "acc": 1.0}] * 10)
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, original)
    assert last == 3
    assert bus.stop_reason == "received SIGTERM"
    assert [(r.source, r.step) for r in stops] == [("signal", 3)]
    assert previous_calls == [signal.SIGTERM]  # handed on to the old handler once the run ended, once
    assert sink.closed == 1
    assert ("s", "end", 3) in log
    assert not any(item[1] == "exception" for item in log)


# -- fetch planning and keys ------------------------------------------------------------------
def test_fetch_planning_fetches_nothing_when_nothing_is_due_and_the_union_otherwise(clock: FakeClock) -> None:
    bus, pub = make(clock, keys=("loss", "acc", "lr"))
    bus.on("after_run", lambda e: None, every_n_steps=2, keys=["loss"])
    bus.on("after_run", lambda e: None, every_n_steps=3, keys=["acc", "loss"])
    reads: list[int] = []

    def values(step: int) -> dict[str, float]:
        reads.append(step)
        return {"loss": 1.0, "acc": 2.0, "lr": 3.0}

    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(8):
            pub.advance(values)
        pub.end()
    assert pub.fetched == [
        (2, ("loss",)),
        (3, ("loss", "acc")),
        (4, ("loss",)),
        (6, ("loss", "acc")),
        (8, ("loss",)),
    ]
    assert reads == [2, 3, 4, 6, 8]
    assert pub.fetched[0][1] is pub.fetched[2][1] is pub.fetched[4][1]
    assert pub.fetched[1][1] is pub.fetched[3][1]


def test_plan_returns_none_on_a_step_where_nothing_is_due(clock: FakeClock) -> None:
    bus, pub = make(clock)
    bus.on("after_run", lambda e: None, every_n_steps=5)
    with bus:
        pub.begin()
        pub.session(0)
        assert [pub.core.plan(s) for s in range(1, 5)] == [None] * 4
        plan = pub.core.plan(5)
        assert plan is not None
        assert plan.keys == ("loss", "acc")


def test_a_subscriber_wanting_every_key_fetches_the_declared_keys(clock: FakeClock) -> None:
    bus, pub = make(clock, keys=("loss", "acc"))
    seen: list[dict[str, float]] = []
    bus.on("after_run", lambda e: seen.append(dict(e.values)), every_n_steps=2)
    bus.on("after_run", lambda e: None, every_n_steps=1, keys="acc")
    run(bus, pub, 2, {"loss": 1.0, "acc": 0.5})
    assert pub.fetched == [(1, ("acc",)), (2, ("loss", "acc"))]
    assert seen == [{"loss": 1.0, "acc": 0.5}]


def test_unknown_subscriber_key_fails_at_begin_naming_key_and_known_keys(clock: FakeClock) -> None:
    bus, pub = make(clock)
    called: list[int] = []
    bus.on("after_run", lambda e: called.append(e.step), keys=["los"])
    with pytest.raises(UnknownKeyError, match=r"'los'.*known keys: \['acc', 'loss'\]"), bus:
        pub.run([{"loss": 1.0, "acc": 1.0}] * 3)
    assert called == []


def test_eval_keys_are_checked_against_eval_publishers(clock: FakeClock) -> None:
    bus, pub = make(clock)
    ScriptedPublisher(bus, keys=["loss"], mode="eval")
    bus.on("after_run", lambda e: None, keys=["eval/loss"])
    bus.on("after_run", lambda e: None, keys=["eval/acc"])
    with pytest.raises(UnknownKeyError, match=r"'eval/acc'.*known keys: \['acc', 'eval/loss', 'loss'\]"), bus:
        pub.run([{"loss": 1.0, "acc": 1.0}])


def test_eval_events_reach_the_subscribers_wanting_those_keys(clock: FakeClock) -> None:
    bus, pub = make(clock)
    evaluator = ScriptedPublisher(bus, keys=["loss"], mode="eval")
    got: dict[str, list[tuple[str, int, dict[str, float]]]] = {"eval": [], "train": [], "all": []}
    bus.on("after_run", lambda e: got["eval"].append((e.mode, e.step, dict(e.values))), keys="eval/loss")
    bus.on("after_run", lambda e: got["train"].append((e.mode, e.step, dict(e.values))), keys="loss", every_n_steps=2)
    bus.on("after_run", lambda e: got["all"].append((e.mode, e.step, dict(e.values))), every_n_steps=100)
    with bus:
        pub.run([{"loss": 1.0, "acc": 1.0}] * 4)
        evaluator.evaluate({"loss": 0.25}, step=4)
    assert got["eval"] == [("eval", 4, {"eval/loss": 0.25})]
    assert got["train"] == [("train", 2, {"loss": 1.0}), ("train", 4, {"loss": 1.0})]
    assert got["all"] == [("eval", 4, {"eval/loss": 0.25})]
    # The eval-only subscriber never made the train publisher fetch.
    assert pub.fetched == [(2, ("loss",)), (4, ("loss",))]


# -- at_end, sessions, deferred work ------------------------------------------------------------
def test_at_end_gets_one_final_event_unless_it_fired_at_the_last_step(clock: FakeClock) -> None:
    bus, pub = make(clock)
    only_end: list[tuple[int, bool, dict[str, float]]] = []
    every5: list[tuple[int, bool]] = []
    bus.on("after_run", lambda e: only_end.append((e.step, e.final, dict(e.values))), at_end=True, keys="loss")
    bus.on("after_run", lambda e: every5.append((e.step, e.final)), every_n_steps=5, at_end=True)
    run(bus, pub, 10, {"loss": 0.5, "acc": 1.0})
    assert only_end == [(10, True, {"loss": 0.5})]
    assert every5 == [(5, False), (10, False)]

    only_end.clear()
    every5.clear()
    run(bus, ScriptedPublisher(bus, keys=["loss", "acc"]), 12, {"loss": 0.5, "acc": 1.0})
    assert every5 == [(5, False), (10, False), (12, True)]


def test_session_created_with_a_rewound_step_resets_schedules(clock: FakeClock) -> None:
    bus, pub = make(clock)
    steps: list[int] = []
    sessions: list[tuple[int, bool]] = []
    bus.on("after_run", lambda e: steps.append(e.step), every_n_steps=10)
    bus.on("session_created", lambda e: sessions.append((e.step, e.restored)))
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(25):
            pub.advance({"loss": 1.0, "acc": 1.0})
        pub.session(5)  # e.g. MonitoredSession re-created after a recoverable error
        for _ in range(20):
            pub.advance({"loss": 1.0, "acc": 1.0})
        pub.end()
    assert steps == [10, 20, 10, 20]
    assert sessions == [(0, False), (5, True)]


def test_call_after_dispatch_runs_after_every_subscriber(clock: FakeClock) -> None:
    bus, pub = make(clock)
    order: list[str] = []

    class Early(Sink):
        def on_after_run(self, event: Event) -> None:
            order.append("early")
            self.context.defer(lambda: order.append(f"deferred{event.step}"))  # the dispatcher's call_after_dispatch

    early = bus.attach(Early(priority=0))
    bus.on("after_run", lambda e: order.append("late"), priority=100)
    bus.after_run.connect(lambda sender, event: order.append("raw"), weak=False)
    run(bus, pub, 1)
    assert order == ["early", "late", "raw", "deferred1"]
    early.context.defer(lambda: order.append("now"))
    assert order[-1] == "now"


def test_a_subscriber_disconnecting_itself_does_not_starve_the_next(clock: FakeClock) -> None:
    bus, pub = make(clock)
    got: list[str] = []
    once: hookbus.Subscription[[Event], None] | None = None

    def first_session_only(event: Event) -> None:
        got.append("once")
        assert once is not None
        once.disconnect()

    once = bus.on("session_created", first_session_only)
    bus.on("session_created", lambda e: got.append("next"))

    class DetachOnClose(Recorder):
        def close(self) -> None:
            super().close()
            bus.detach(self)

    log: list[Any] = []
    sinks = [bus.attach(DetachOnClose(log, name="a")), bus.attach(Recorder(log, name="b"))]
    run(bus, pub, 1)
    assert got == ["once", "next"]
    assert [s.closed for s in sinks] == [1, 1]


def test_values_scalars_become_floats_arrays_stay_arrays_bytes_pass(clock: FakeClock) -> None:
    import numpy as np

    bus, pub = make(clock, keys=("f32", "i64", "arr", "scalar_arr", "proto", "nan"))
    seen: list[dict[str, Any]] = []
    bus.on("after_run", lambda e: seen.append(dict(e.values)))
    raw = {
        "f32": np.float32(0.5),
        "i64": np.int64(3),
        "arr": np.arange(3.0),
        "scalar_arr": np.array(2.5),
        "proto": b"\x08\x01",
        "nan": float("nan"),
    }
    run(bus, pub, 1, raw)
    values = seen[0]
    assert type(values["f32"]) is float
    assert values["f32"] == 0.5
    assert type(values["i64"]) is float
    assert values["i64"] == 3.0
    assert type(values["scalar_arr"]) is float
    assert isinstance(values["arr"], np.ndarray)
    assert values["arr"].tolist() == [0.0, 1.0, 2.0]
    assert values["proto"] == b"\x08\x01"
    assert np.isnan(values["nan"])


def test_each_with_bus_is_a_fresh_run_for_schedules_and_error_policies(clock: FakeClock) -> None:
    bus, pub = make(clock)
    fired: list[int] = []
    bus.on("after_run", lambda e: fired.append(e.step), every_n_steps=10, keys="loss")

    calls: list[int] = []

    def broken(event: Event) -> None:
        calls.append(event.step)
        raise RuntimeError("broken")

    bus.on("after_run", broken, on_error="disable", keys="loss")
    with bus:
        pub.run([{"loss": 1.0, "acc": 1.0}] * 25)
    assert fired == [10, 20]
    assert calls == [1]  # disabled after its first failure
    with bus:  # a new run from step 0: the multiples fire again, the disabled one is back
        pub.run([{"loss": 1.0, "acc": 1.0}] * 10)
    assert fired == [10, 20, 10]
    assert calls == [1, 1]
    assert [r.errors for r in bus.subscribers] == [0, 1]


def test_every_sink_is_closed_once_even_when_a_close_raises_keyboard_interrupt(tmp_path: Any) -> None:
    """Ctrl-C inside one sink's close: the sinks after it still close (their rows reach the file),
    each exactly once, and the KeyboardInterrupt still surfaces."""
    from hookbus.sinks import CSVSink

    closed: list[str] = []

    class Interrupted(Sink):
        def close(self) -> None:
            closed.append("interrupted")
            raise KeyboardInterrupt

    class Counted(Sink):
        def close(self) -> None:
            closed.append("counted")

    bus = EventBus()
    bus.attach(Interrupted(priority=1))
    csv_sink = bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=1, flush_secs=3600))
    bus.attach(Counted())
    with pytest.raises(KeyboardInterrupt), bus:
        ScriptedPublisher(bus, keys=["loss"]).run([{"loss": float(i)} for i in range(5)])
    assert closed == ["interrupted", "counted"]
    rows = [line.split(",") for line in (tmp_path / "m.csv").read_text().splitlines()[1:]]
    assert [(int(r[0]), float(r[2])) for r in rows] == [(s, float(s - 1)) for s in range(1, 6)]  # closed: written
    bus.close()  # idempotent: nothing is closed twice
    assert closed == ["interrupted", "counted"]
    assert csv_sink.path.exists()


def test_a_signal_during_begin_is_recorded_with_its_reason(handed_on: list[int]) -> None:
    """SIGTERM while the publisher begins (before any step): the run stops and says why."""
    bus = EventBus()
    requests: list[StopRequest] = []
    bus.on("begin", lambda event: os.kill(os.getpid(), signal.SIGTERM))  # a real signal, mid-begin
    bus.on("stop_requested", requests.append)
    publisher = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        publisher.begin()
        assert bus.should_stop
        assert bus.stop_reason == "received SIGTERM"
        publisher.end()
    assert [(r.reason, r.source) for r in requests] == [("received SIGTERM", "signal")]
    assert handed_on == [signal.SIGTERM]


def _run_with_signals(bus: EventBus, at_step: int, *signals: int) -> list[int]:
    """Publish steps until the bus stops; at ``at_step`` a subscriber sends ``signals`` to this process."""
    steps: list[int] = []

    def send(event: Event) -> None:
        steps.append(event.step)
        if event.step == at_step:
            for signum in signals:
                os.kill(os.getpid(), signum)  # delivered to this (main) thread before kill returns

    bus.on("after_run", send)
    publisher = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        publisher.run([{"loss": 1.0}] * 100)
    return steps


def test_the_first_ctrl_c_stops_gracefully_then_surfaces_as_keyboard_interrupt(tmp_path: Any) -> None:
    from hookbus.sinks import CSVSink

    bus = EventBus()
    csv_sink = bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=1, flush_secs=3600))
    requests: list[StopRequest] = []
    errors: list[Any] = []
    bus.on("stop_requested", requests.append)
    bus.on("exception", errors.append)
    with pytest.raises(KeyboardInterrupt, match="stopped gracefully after Ctrl-C"):
        _run_with_signals(bus, 5, signal.SIGINT)
    # The run stopped at the step that saw the signal, every row of it is on disk, nothing failed.
    assert [(r.reason, r.source, r.step) for r in requests] == [("received SIGINT", "signal", 5)]
    assert errors == []
    rows = csv_sink.path.read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == [1, 2, 3, 4, 5]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # pytest's, restored


def test_a_ctrl_c_between_two_sessions_ends_the_run_stopped(tmp_path: Any) -> None:
    """The signal comes after the last publisher ended (an evaluation finished, the next round
    has not begun): no step polls it, so the run's end publishes it, and the run ends "stopped"
    in the event log, as the KeyboardInterrupt says, not "finished"."""
    import json

    from hookbus.sinks import EventLogSink

    bus = EventBus()
    bus.attach(EventLogSink(tmp_path / "events.jsonl"))
    requests: list[StopRequest] = []
    bus.on("stop_requested", requests.append)
    seen: list[bool] = []

    def train_then_interrupt() -> None:
        with bus:
            ScriptedPublisher(bus, keys=["loss"]).run([{"loss": 1.0}] * 3)  # begin, 3 steps, end
            os.kill(os.getpid(), signal.SIGINT)  # between sessions: delivered before kill returns
            seen.append(bus.should_stop)  # what a train-then-evaluate loop checks before its next round

    with pytest.raises(KeyboardInterrupt, match="stopped gracefully after Ctrl-C"):
        train_then_interrupt()
    assert seen == [True]
    assert [(r.reason, r.source, r.step) for r in requests] == [("received SIGINT", "signal", 3)]
    records = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert records[-1]["ended"] == "stopped"


def test_a_second_ctrl_c_interrupts_at_once() -> None:
    bus = EventBus()
    errors: list[Any] = []
    bus.on("exception", errors.append)
    with pytest.raises(KeyboardInterrupt) as raised:
        _run_with_signals(bus, 5, signal.SIGINT, signal.SIGINT)
    assert str(raised.value) == ""  # the interrupt itself, not the graceful end
    assert [type(e.error) for e in errors] == [KeyboardInterrupt]
    assert bus.stop_reason == "received SIGINT"


def test_stop_signals_adds_a_graceful_stop_signal_and_restores_its_handler(handed_on: list[int]) -> None:
    before = signal.getsignal(signal.SIGUSR1)
    bus = EventBus(stop_signals=["SIGUSR1"])
    steps = _run_with_signals(bus, 7, signal.SIGUSR1)
    assert steps == list(range(1, 8))
    assert bus.stop_reason == "received SIGUSR1"
    assert signal.getsignal(signal.SIGUSR1) is before
    assert handed_on == [signal.SIGUSR1]  # handed on to it once the run ended


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["SIGKILL"], "stop_signals cannot take SIGKILL: it cannot be caught"),
        ([signal.SIGINT], "stop_signals cannot take SIGINT: Ctrl-C already stops gracefully"),
        (["SIGNOPE"], "stop_signals must be signal numbers or names \\(got 'SIGNOPE'\\)"),
    ],
)
def test_bad_stop_signals_fail_at_construction(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EventBus(stop_signals=value)


def test_an_ignored_ctrl_c_stays_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job
    try:
        with EventBus():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_reused_bus_starts_clean_a_publisher_of_an_earlier_run_no_longer_counts() -> None:
    """Run 1 had a publisher of 'acc'; run 2's publisher has only 'loss': a subscriber that needs
    'acc' now fails the key check at begin (it would never receive a value), naming the key."""
    bus = EventBus()
    with bus:
        ScriptedPublisher(bus, keys=["loss", "acc"]).run([{"loss": 1.0, "acc": 0.5}])
    bus.on("after_run", lambda event: None, keys="acc", name="needs-acc")
    second = ScriptedPublisher(bus, keys=["loss"])
    with pytest.raises(UnknownKeyError, match="subscriber 'needs-acc' needs key 'acc'.*known keys: \\['loss'\\]"), bus:
        second.begin()


def test_an_unknown_keys_error_gives_each_publishers_advice_once() -> None:
    bus = EventBus()
    bus.on("after_run", lambda event: None, keys="acc", name="needs-acc")
    plain = ScriptedPublisher(bus, keys=["loss"])
    with pytest.raises(UnknownKeyError) as raised, bus:
        plain.begin()
    assert str(raised.value).endswith(
        ". Construct every publisher before training begins, each declaring the keys it provides."
    )
    train, evaluation = ScriptedPublisher(bus, keys=["loss"]), ScriptedPublisher(bus, keys=["loss"], mode="eval")
    train.core.key_advice = evaluation.core.key_advice = "Declare it in fetches=."
    with pytest.raises(UnknownKeyError) as raised, bus:
        train.begin()
    assert str(raised.value).endswith("known keys: ['eval/loss', 'loss']. Declare it in fetches=.")


def test_a_publisher_that_begins_again_counts_again_and_one_not_begun_yet_counts() -> None:
    bus = EventBus()
    train = ScriptedPublisher(bus, keys=["loss"])
    evaluation = ScriptedPublisher(bus, keys=["loss"], mode="eval")  # begins after training, each run
    for _ in range(2):
        with bus:
            train.run([{"loss": 1.0}])
            evaluation.begin()
            evaluation.evaluate({"loss": 0.5})
            evaluation.end()
        assert bus.known_keys == {"loss", "eval/loss"}


def test_a_custom_sink_is_checked_when_attached() -> None:
    class Typo(Sink):
        def on_after_runs(self, event: Event) -> None: ...

    class NoBase(Sink):
        def __init__(self) -> None:
            self.rows = 0

    class Arity(Sink):
        def on_after_run(self) -> None:  # type: ignore[override]
            ...

    class Helper(Sink):
        def on_rows_written(self, count: int) -> None: ...  # not a handler name: allowed

        def on_after_run(self, event: Event, *extra: Any) -> None: ...

    bus = EventBus()
    with pytest.raises(
        TypeError, match="Typo.on_after_runs looks like a misspelled handler .did you mean on_after_run"
    ):  # noqa: E501 - the message
        bus.attach(Typo())
    with pytest.raises(TypeError, match="NoBase.__init__ did not run hookbus.sink_api.Sink.__init__"):
        bus.attach(NoBase())
    with pytest.raises(TypeError, match="Arity.on_after_run must take exactly one argument, the event"):
        bus.attach(Arity())
    assert "after_run" in bus.attach(Helper()).handlers()


def test_on_is_a_typed_decorator_that_keeps_the_function() -> None:
    """``@bus.on(...)`` returns a :class:`hookbus.Subscription` generic in the function's
    parameters and result, so under strict mypy the decorated name is still typed (mypy checks
    the ``assert_type`` lines; with ``on`` returning ``Any`` they fail it)."""
    bus = EventBus()

    @bus.on("after_run", every_n_steps=2)
    def loss_of(event: Event) -> float:
        return float(event.values["loss"])

    direct = bus.on("session_created", lambda event: None)
    event = Event("after_run", 2, values={"loss": 0.5})
    typed: hookbus.Subscription[[Event], float] = loss_of
    if TYPE_CHECKING:
        assert_type(loss_of(event), float)
        assert_type(direct.connected, bool)
    assert typed(event) == 0.5
    assert [s.name for s in bus.subscribers] == [loss_of.name, direct.name]
    assert loss_of.name.endswith("loss_of")
    assert repr(loss_of) == f"<Subscription {loss_of.name!r} to 'after_run'>"
    with direct:
        assert direct.connected
    assert not direct.connected
    assert loss_of.connected


@pytest.mark.parametrize("order", ["nested", "in the order they began"])
def test_runs_of_two_buses_ending_in_any_order_put_back_the_programs_handlers(order: str) -> None:
    """``hookbus watch`` closes its views' runs in the order they opened: the run that ends first
    leaves the other's handlers in place, and the last one puts back the program's, never the
    handler of a run that has ended (it would swallow the program's next Ctrl-C)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    first, second = EventBus(), EventBus()
    first.__enter__()
    second.__enter__()
    ending = [second, first] if order == "nested" else [first, second]
    ending[0].__exit__(None, None, None)
    assert signal.getsignal(signal.SIGINT) == ending[1]._scope._on_sigint  # the run still going keeps its own
    ending[1].__exit__(None, None, None)
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_stop_signal_of_the_run_ending_last_goes_on_to_the_programs_handler_not_an_ended_runs() -> None:
    """Two buses' runs end in the order they began; SIGTERM stops the second: when it ends, the
    signal goes on to the program's handler (as if it came now), not to the first run's handler
    that the second replaced (that run has ended: the stop would be lost on it)."""
    received: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        first, second = EventBus(), EventBus()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        os.kill(os.getpid(), signal.SIGTERM)
        assert second.should_stop
        assert received == []
        second.__exit__(None, None, None)
        assert received == [signal.SIGTERM]
        assert not first.should_stop
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_bus_that_does_not_handle_signals_leaves_the_programs_handlers() -> None:
    """``EventBus(handle_signals=False)``: ``with bus:`` installs nothing; Ctrl-C stays the program's."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    bus = EventBus(handle_signals=False)
    with bus:
        assert {s: signal.getsignal(s) for s in before} == before
        ScriptedPublisher(bus, keys=["loss"]).run([{"loss": 1.0}] * 3)
    assert {s: signal.getsignal(s) for s in before} == before
