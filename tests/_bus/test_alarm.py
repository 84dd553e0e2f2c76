"""The run's timer thread: it marks due times passed so that a quiet step reads a flag, not the clock.

Driven by an injected clock and an injected wait (which records each timeout the thread asks for,
then waits for a notification), so every assertion follows a handshake, never a sleep.
"""

from __future__ import annotations

import gc
import math
import queue
import threading
from collections.abc import Callable

from hookbus import EventBus
from hookbus._bus._alarm import Alarm
from hookbus.testing import FakeClock, ScriptedPublisher

HANDSHAKE_SECS = 60.0  # a bound on a hang, never on speed


class CountingClock(FakeClock):
    """A fake clock that counts its readings."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return super().__call__()


def recording_wait() -> tuple[queue.Queue[float | None], Callable[[threading.Condition, float | None], None]]:
    """An injected wait that reports each timeout asked for, then waits for a notification."""
    asked: queue.Queue[float | None] = queue.Queue()

    def wait(condition: threading.Condition, timeout: float | None) -> None:
        asked.put(timeout)
        condition.wait()

    return asked, wait


def test_a_bell_rings_once_the_clock_reaches_its_time_and_not_before() -> None:
    clock = FakeClock()
    asked, wait = recording_wait()
    alarm = Alarm(clock=clock, wait=wait)
    bell = alarm.bell()
    assert bell.rang
    assert bell.at == math.inf
    assert not alarm.running
    alarm.arm(bell, 10.0)
    assert alarm.running
    assert asked.get(timeout=HANDSHAKE_SECS) == 10.0  # waits until the armed time
    assert not bell.rang
    clock.now = 9.5
    alarm.poke()
    assert asked.get(timeout=HANDSHAKE_SECS) == 0.5
    assert not bell.rang
    clock.now = 10.0
    alarm.poke()
    assert asked.get(timeout=HANDSHAKE_SECS) is None  # nothing armed left: waits to be armed
    assert bell.rang
    assert alarm.stop()
    assert not alarm.running


def test_the_thread_waits_for_the_earliest_of_several_bells_and_rearming_moves_it() -> None:
    clock = FakeClock()
    asked, wait = recording_wait()
    alarm = Alarm(clock=clock, wait=wait)
    late, early = alarm.bell(), alarm.bell()
    alarm.arm(late, 30.0)
    assert asked.get(timeout=HANDSHAKE_SECS) == 30.0
    alarm.arm(early, 5.0)
    assert asked.get(timeout=HANDSHAKE_SECS) == 5.0
    clock.now = 5.0
    alarm.poke()
    assert asked.get(timeout=HANDSHAKE_SECS) == 25.0
    assert early.rang
    assert not late.rang
    alarm.arm(early, 12.0)  # a due step moved the limit on: armed anew
    assert asked.get(timeout=HANDSHAKE_SECS) == 7.0
    assert not early.rang
    assert alarm.stop()


def test_stop_ends_the_one_thread_marks_every_bell_rung_and_a_new_arming_starts_another() -> None:
    clock = FakeClock()
    asked, wait = recording_wait()
    alarm = Alarm(clock=clock, wait=wait)
    bell = alarm.bell()
    others = {t for t in threading.enumerate() if t.name == "hookbus-alarm"}  # other buses' runs in this process
    alarm.arm(bell, 10.0)
    assert asked.get(timeout=HANDSHAKE_SECS) == 10.0
    alarms = [t for t in threading.enumerate() if t.name == "hookbus-alarm" and t not in others]
    assert len(alarms) == 1  # this alarm's one thread
    assert alarm.stop()  # joined within its deadline
    assert bell.rang  # its core reads the clock again
    assert all(not t.is_alive() for t in alarms if t is not threading.current_thread())
    assert alarm.stop()  # stopping twice is harmless
    alarm.arm(bell, 20.0)
    assert alarm.running
    assert not bell.rang
    assert asked.get(timeout=HANDSHAKE_SECS) == 20.0
    assert alarm.stop()


def test_quiet_steps_read_the_bell_not_the_clock_and_the_time_rule_still_fires_when_it_rings() -> None:
    clock = CountingClock()
    asked, wait = recording_wait()
    bus = EventBus(clock=clock)
    bus._scope.alarm = Alarm(clock=clock, wait=wait)  # the run's timer, on the test's clock
    fired: list[int] = []
    bus.on("after_run", lambda e: fired.append(e.step), every_n_secs=5)
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        pub.advance({"loss": 1.0})  # a time rule is due at the first step seen
        assert fired == [1]
        # Quiet: the clock is read, and the timer armed for the rule (5.0) and the run's stop
        # watcher (1.0: the evaluator link's poll); once it saw both, it waits for the earlier.
        pub.advance({"loss": 1.0})
        while asked.get(timeout=HANDSHAKE_SECS) != 1.0:
            pass
        reads = clock.reads
        for _ in range(50):
            pub.advance({"loss": 1.0})
        assert clock.reads == reads  # fifty quiet steps, no clock read
        assert fired == [1]
        clock.now = 5.0  # the time comes: the timer rings; the next step reads the clock and fires
        bus._scope.alarm.poke()
        assert asked.get(timeout=HANDSHAKE_SECS) is None
        pub.advance({"loss": 1.0})
        assert fired == [1, 53]
        pub.end()
    assert not bus._scope.alarm.running  # stopped with the run


def test_a_bus_on_another_clock_than_the_timers_reads_its_clock_and_its_rule_fires_by_that_clock() -> None:
    clock = CountingClock()
    bus = EventBus(clock=clock)  # the run's timer is on time.monotonic: it cannot ring for this clock
    fired: list[int] = []
    bus.on("after_run", lambda e: fired.append(e.step), every_n_secs=5)
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 21):
            clock.now = step * 0.5
            pub.advance({"loss": 1.0})
        pub.end()
        assert bus._scope.alarm.running  # the run's thread: nothing armed on it
    assert fired == [1, 11]  # at 0.5, then at 5.5 (5 seconds on)
    assert not bus._scope.alarm.running  # stopped with the run


def test_a_bell_whose_core_is_gone_leaves_the_alarm() -> None:
    # A bus that makes publishers over and over (an evaluation each) must not keep their bells.
    alarm = Alarm(clock=FakeClock())
    kept = alarm.bell()
    alarm.bell()  # dropped at once, as a core that is gone drops its own
    gc.collect()
    assert list(alarm._bells) == [kept]
