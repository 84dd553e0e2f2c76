"""Schedules: step multiples, wall-clock intervals, both, begin and end; validation; properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hookbus
from hookbus import EventBus
from hookbus.sink_api import Schedule
from hookbus.testing import FakeClock, ScriptedPublisher


def fire_steps(schedule: Schedule, steps: list[int], *, start: int = 0, times: list[float] | None = None) -> list[int]:
    """Drive a timer over ``steps`` (firing whenever due); the steps it fired at."""
    timer = schedule.timer()
    timer.reset(start)
    fired = []
    for i, step in enumerate(steps):
        now = times[i] if times is not None else 0.0
        if timer.is_due(step, now):
            timer.fire(step, now)
            fired.append(step)
    return fired


# -- every_n_steps ----------------------------------------------------------------------------
def test_every_n_steps_fires_at_multiples() -> None:
    assert fire_steps(Schedule(every_n_steps=3), list(range(1, 11))) == [3, 6, 9]


def test_every_n_steps_fires_once_when_a_step_jumps_past_several_multiples() -> None:
    # 2 -> 7 passes 3 and 6 (one bucket change counted once), 7 -> 8 nothing new, 8 -> 9 reaches 9.
    assert fire_steps(Schedule(every_n_steps=3), [2, 7, 8, 9, 20]) == [7, 9, 20]


def test_every_n_steps_counts_from_the_session_start() -> None:
    # Resumed at 100: step 100 was published before the checkpoint; the next multiple is 200.
    assert fire_steps(Schedule(every_n_steps=100), list(range(101, 301)), start=100) == [200, 300]


def test_reset_to_an_earlier_step_makes_passed_multiples_due_again() -> None:
    timer = Schedule(every_n_steps=10).timer()
    timer.reset(0)
    for step in range(1, 26):
        if timer.is_due(step, 0.0):
            timer.fire(step, 0.0)
    timer.reset(5)
    assert not timer.is_due(9, 0.0)
    assert timer.is_due(10, 0.0)


# -- every_n_secs -----------------------------------------------------------------------------
def test_every_n_secs_fires_first_step_then_after_the_interval() -> None:
    times = [0.0, 10.0, 29.9, 30.0, 31.0, 59.0, 61.0]
    fired = fire_steps(Schedule(every_n_secs=30), list(range(1, 8)), times=times)
    assert fired == [1, 4, 7]  # 0.0, then 30.0 (>= 30 after 0), then 61.0 (>= 30 after 30)


def test_both_rules_whichever_comes_first() -> None:
    # Steps every 5, or 10 seconds; a firing by either rule restarts both.
    schedule = Schedule(every_n_steps=5, every_n_secs=10)
    steps = list(range(1, 13))
    times = [0, 1, 2, 11, 12, 13, 14, 15, 16, 17, 18, 30]
    # 1: first step (time). 4: 11s after 1 (time). 5: multiple of 5 (steps). 10: multiple. 12: 30 >= 17 + 10.
    assert fire_steps(schedule, steps, times=[float(t) for t in times]) == [1, 4, 5, 10, 12]


# -- at_begin / at_end ------------------------------------------------------------------------
def test_at_begin_fires_at_the_first_step_of_each_session() -> None:
    timer = Schedule(every_n_steps=100, at_begin=True).timer()
    timer.reset(0)
    fired = []
    for step in range(1, 4):
        if timer.is_due(step, 0.0):
            timer.fire(step, 0.0)
            fired.append(step)
    timer.reset(3)
    for step in range(4, 6):
        if timer.is_due(step, 0.0):
            timer.fire(step, 0.0)
            fired.append(step)
    assert fired == [1, 4]


def test_at_end_is_owed_unless_it_already_fired_at_the_final_step() -> None:
    timer = Schedule(every_n_steps=5, at_end=True).timer()
    timer.reset(0)
    for step in range(1, 11):
        if timer.is_due(step, 0.0):
            timer.fire(step, 0.0)
    assert not timer.is_due_at_end(10)
    assert timer.is_due_at_end(12)
    assert not Schedule(every_n_steps=5).timer().is_due_at_end(12)


def test_at_end_alone_never_fires_on_a_step() -> None:
    assert Schedule(at_end=True).is_empty
    assert fire_steps(Schedule(at_end=True), list(range(1, 50))) == []


# -- validation -------------------------------------------------------------------------------
BAD_STEPS = [0, -1, 1.5, 2.0, math.nan, math.inf, True, False, "10", [10]]
BAD_SECS = [0, -1, -0.5, math.nan, math.inf, -math.inf, True, "5", [5]]


@pytest.mark.parametrize("value", BAD_STEPS, ids=repr)
def test_invalid_every_n_steps_names_argument_and_value(value: object) -> None:
    with pytest.raises(ValueError, match="every_n_steps") as excinfo:
        Schedule(every_n_steps=value)  # type: ignore[arg-type]
    assert f"(got {value!r})" in str(excinfo.value)


@pytest.mark.parametrize("value", BAD_SECS, ids=repr)
def test_invalid_every_n_secs_names_argument_and_value(value: object) -> None:
    with pytest.raises(ValueError, match="every_n_secs") as excinfo:
        Schedule(every_n_secs=value)  # type: ignore[arg-type]
    assert f"(got {value!r})" in str(excinfo.value)


@pytest.mark.parametrize("argument", ["at_begin", "at_end"])
@pytest.mark.parametrize("value", [1, "yes", None])
def test_invalid_flags_name_argument_and_value(argument: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"{argument} must be True or False \\(got {value!r}\\)"):
        Schedule(**{argument: value})  # type: ignore[arg-type]


def test_valid_values_are_kept() -> None:
    schedule = Schedule(every_n_steps=7, every_n_secs=2, at_begin=True, at_end=True)
    assert (schedule.every_n_steps, schedule.every_n_secs) == (7, 2.0)
    assert isinstance(schedule.every_n_secs, float)


def test_sinks_and_functions_validate_at_construction() -> None:
    bus = EventBus()
    with pytest.raises(ValueError, match=r"every_n_steps must be a positive int \(got 0\)"):
        bus.on("after_run", lambda e: None, every_n_steps=0)
    with pytest.raises(ValueError, match=r"every_n_secs .*\(got -3\)"):
        hookbus.sink_api.Sink(every_n_secs=-3)
    with pytest.raises(ValueError, match="schedule arguments apply to 'before_run' and 'after_run' only"):
        bus.on("end", lambda e: None, every_n_steps=2)
    assert bus.subscribers == []


# -- properties -------------------------------------------------------------------------------
increasing_steps = st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=60).map(
    lambda gaps: [sum(gaps[: i + 1]) for i in range(len(gaps))]
)


def reference_fires(n: int, start: int, steps: list[int]) -> list[int]:
    """Independent model: fire at a step iff a multiple of n lies in (step of last firing, step]."""
    fired, last = [], start
    for step in steps:
        if any(m % n == 0 for m in range(last + 1, step + 1)):
            fired.append(step)
            last = step
    return fired


@given(n=st.integers(1, 50), start=st.integers(0, 200), gaps=increasing_steps)
def test_every_n_steps_matches_reference_model(n: int, start: int, gaps: list[int]) -> None:
    steps = [start + g for g in gaps]
    fired = fire_steps(Schedule(every_n_steps=n), steps, start=start)
    assert fired == reference_fires(n, start, steps)
    # Never twice for the same bucket; exactly once per bucket newly reached.
    buckets = [s // n for s in fired]
    assert len(set(buckets)) == len(buckets)
    assert set(buckets) == {s // n for s in steps} - set(range(start // n + 1))


@given(
    n=st.integers(1, 30),
    secs=st.floats(0.5, 20.0),
    gaps=increasing_steps,
    dts=st.lists(st.floats(0.0, 15.0), min_size=60, max_size=60),
)
def test_both_rules_match_reference_model(n: int, secs: float, gaps: list[int], dts: list[float]) -> None:
    times = [sum(dts[: i + 1]) for i in range(len(gaps))]
    fired = fire_steps(Schedule(every_n_steps=n, every_n_secs=secs), gaps, times=times)
    expected, last_step, last_time = [], 0, None
    for step, now in zip(gaps, times, strict=True):
        by_steps = any(m % n == 0 for m in range(last_step + 1, step + 1))
        by_time = last_time is None or now - last_time >= secs
        if by_steps or by_time:
            expected.append(step)
            last_step, last_time = step, now
    assert fired == expected


@given(
    n=st.one_of(st.none(), st.integers(1, 30)),
    secs=st.one_of(st.none(), st.floats(0.5, 20.0)),
    at_begin=st.booleans(),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 400), st.floats(0.0, 100.0)), max_size=30),
)
def test_the_kept_bounds_are_where_is_due_turns_true(
    n: int | None, secs: float | None, at_begin: bool, ops: list[tuple[bool, int, float]]
) -> None:
    # Issue 30: next_step / next_time are attributes the writes keep (the planner reads them after
    # every due step); after any fires and resets they bound is_due exactly: by steps, is_due at a
    # step (the clock far from due) is true from next_step on; by time, from next_time on.
    timer = Schedule(every_n_steps=n, every_n_secs=secs, at_begin=at_begin).timer()
    for fire, step, now in ops:
        if fire:
            timer.fire(step, now)
        else:
            timer.reset(step, now)
        never = -1e18 if timer.next_time == -math.inf else timer.next_time - 1.0  # a time not due yet
        if secs is None or timer.next_time > 0:
            for probe in range(max(0, step - 2 * (n or 1)), step + 3 * (n or 1)):
                assert timer.is_due(probe, never) == (probe >= timer.next_step), (probe, timer.next_step)
        if secs is not None and timer.next_step == math.inf:
            assert timer.is_due(step, timer.next_time + 1e-6)
            assert timer.next_time == -math.inf or not timer.is_due(step, timer.next_time - 1e-6)


@given(n=st.integers(1, 20), gaps=increasing_steps)
def test_bus_delivers_per_reference_model_with_jumping_steps(n: int, gaps: list[int]) -> None:
    bus = EventBus(clock=FakeClock())
    got: list[int] = []
    bus.on("after_run", lambda e: got.append(e.step), every_n_steps=n)
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for step in gaps:
            pub.advance({"loss": 1.0}, step=step)
        pub.end()
    assert got == reference_fires(n, 0, gaps)
    assert [s for s, _ in pub.fetched] == got


@given(
    rules=st.lists(
        st.tuples(st.one_of(st.none(), st.integers(1, 12)), st.one_of(st.none(), st.floats(0.5, 5.0)), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    runs=st.lists(st.tuples(st.integers(1, 7), st.floats(0.0, 3.0), st.booleans()), min_size=1, max_size=40),
)
def test_the_planners_due_set_is_every_enabled_subscriber_whose_rule_is_due(
    rules: list[tuple[int | None, float | None, bool]], runs: list[tuple[int, float, bool]]
) -> None:
    # Issue 30: Planner.due compares the kept next_step and asks is_due only of time rules; it
    # must pick exactly the enabled subscribers is_due picks, at every step (jumps, fires, resets).
    from hookbus._bus._subscription import Subscriber
    from hookbus._publishing._planner import Planner

    subs = [
        Subscriber(
            name=f"s{i}",
            handlers={"after_run": lambda e: None},
            keys=None,
            priority=0,
            on_error="log",
            order=i,
            schedule=Schedule(every_n_steps=n, every_n_secs=secs, at_begin=begin),
        )
        for i, (n, secs, begin) in enumerate(rules)
        if n is not None or secs is not None or begin
    ]
    planner = Planner(("loss",), frozenset({"loss"}))
    planner.refresh(subs)
    step, now = 0, 0.0
    for jump, dt, fire in runs:
        step, now = step + jump, now + dt
        if subs and jump == 7:
            subs[step % len(subs)].disabled = not subs[step % len(subs)].disabled
        expected = [r for r in subs if not r.disabled and r.timer.is_due(step, now)]
        due = planner.due(step, now)
        assert due == expected
        for record in due if fire else ():
            record.timer.fire(step, now)
        if jump == 1 and not fire:
            for record in subs:
                record.timer.reset(step, now)


# -- steps_from_last_firing (TensorFlow's SecondOrStepTimer, for hookbus.from_hooks) ----------------
def test_steps_from_last_firing_fires_at_the_first_step_then_every_n_after_it() -> None:
    """SecondOrStepTimer: the first step, then once n steps have passed since the last firing."""
    schedule = Schedule(every_n_steps=5, steps_from_last_firing=True)
    assert fire_steps(schedule, list(range(1, 13))) == [1, 6, 11]
    assert fire_steps(Schedule(every_n_steps=5), list(range(1, 13))) == [5, 10]  # the multiples, unchanged
    # A step that jumps counts from the step it fired at (12 + 5), not from a multiple.
    assert fire_steps(schedule, [1, 3, 12, 16, 17]) == [1, 12, 17]


def test_steps_from_last_firing_starts_again_at_each_session() -> None:
    timer = Schedule(every_n_steps=5, steps_from_last_firing=True).timer()
    timer.reset(0)
    assert timer.next_step == -math.inf
    timer.fire(1, 0.0)
    assert timer.next_step == 6
    timer.reset(7)  # a new session: its first step fires, as a new hook's timer does
    assert timer.next_step == -math.inf
    assert timer.is_due(8, 0.0)


def test_steps_from_last_firing_from_the_session_start_counts_from_its_step() -> None:
    """CheckpointSaverHook's rule (it saves as a session starts): a session from S is due at S + n."""
    schedule = Schedule(every_n_steps=4, secs_from_session_start=True, steps_from_last_firing=True)
    assert fire_steps(schedule, list(range(1, 13))) == [4, 8, 12]
    assert fire_steps(schedule, list(range(7, 16)), start=6) == [10, 14]  # a resume at 6, not 8 and 12
    timer = schedule.timer()
    timer.reset(6)
    assert timer.next_step == 10
    assert not timer.is_due_at_end(6)  # a session that ends where it started owes no final firing
    # A timer no session has reset yet (a run begun after its session) counts the multiples: it never
    # fires at the first step it sees, as a save at the session's start would.
    fresh = schedule.timer()
    assert fresh.next_step == 4
    assert not fresh.is_due(1, 0.0)


def test_steps_from_last_firing_is_planned_exactly_by_the_publisher() -> None:
    """The publisher fetches only on the steps the timer fires at (its ``next_step`` is exact)."""
    bus = EventBus(clock=FakeClock())
    fired: list[int] = []

    class Steps(hookbus.sink_api.Sink):
        def on_after_run(self, event: hookbus.Event) -> None:
            fired.append(event.step)

    sink = Steps(keys=["loss"])
    sink.schedule = Schedule(every_n_steps=4, steps_from_last_firing=True)
    bus.attach(sink)
    publisher = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        publisher.run({"loss": 1.0} for _ in range(10))
    assert fired == [1, 5, 9]
    assert [step for step, _ in publisher.fetched] == [1, 5, 9]


def test_steps_from_last_firing_must_be_a_flag() -> None:
    with pytest.raises(ValueError, match="steps_from_last_firing"):
        Schedule(every_n_steps=2, steps_from_last_firing="yes")  # type: ignore[arg-type]
