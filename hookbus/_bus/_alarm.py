"""A timer thread that marks time limits passed, so that a quiet step reads a flag, not the clock.

A publisher's core, on a step where nothing is due, compares the step with the next due step
and the clock with the next due time (the earliest time rule of its subscribers, or a stop
watcher's). Reading the clock on every such step is most of what a quiet step costs with a
time rule attached (the dashboard's). Instead the core arms a :class:`Bell` at that time; one
daemon thread per run (:class:`Alarm`, started when the run begins, stopped when it
closes) waits until the earliest armed time and marks its bells rung. A quiet step then reads
``bell.at`` and ``bell.rang``; once the bell rang, the core reads the clock itself and decides
as before, so the thread can only make a step look at the clock sooner, never make a time rule
due: the decision stays the clock's (a bell rings a few milliseconds late at most, the time
the thread takes to be scheduled).
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable

__all__ = ["Alarm", "Bell"]

#: How long :meth:`Alarm.stop` waits for the thread to end (it ends at once: it only waits).
STOP_DEADLINE_SECS = 5.0


class Bell:
    """One core's armed time.

    Attributes:
        at: The clock time it is armed for (``inf``: not armed).
        rang: Whether the clock reached ``at`` (``True`` until armed: read the clock).
    """

    __slots__ = ("__weakref__", "at", "rang")

    def __init__(self) -> None:
        self.at = math.inf
        self.rang = True


def _wait(condition: threading.Condition, timeout: float | None) -> None:
    condition.wait(timeout)


class Alarm:
    """Rings every :class:`Bell` once ``clock`` reaches its time, from one daemon thread.

    Args:
        clock: The monotonic clock the bells' times are on (a core arms a bell only while the
            bus runs on this clock; a bus on another clock, a replay's or a test's, reads it).
        wait: How the thread waits on its condition for at most ``timeout`` seconds (``None``:
            until notified); injected by tests, which drive ``clock`` themselves.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Condition, float | None], None] = _wait,
    ) -> None:
        self.clock = clock
        self._wait = wait
        self._condition = threading.Condition()
        self._bells: weakref.WeakSet[Bell] = weakref.WeakSet()  # a core gone takes its bells along
        self._thread: threading.Thread | None = None
        self._generation = 0  # a stopped thread sees it moved and ends

    def bell(self) -> Bell:
        """A new bell, not armed."""
        bell = Bell()
        with self._condition:
            self._bells.add(bell)
        return bell

    def start(self) -> None:
        """Start the thread (a run begins), unless it runs: it waits until a bell is armed."""
        with self._condition:
            self._start()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, args=(self._generation,), name="hookbus-alarm", daemon=True
            )
            self._thread.start()

    def arm(self, bell: Bell, at: float) -> None:
        """Ring ``bell`` once the clock reaches ``at`` (starts the thread if it is not running)."""
        with self._condition:
            bell.at, bell.rang = at, False
            self._start()
            self._condition.notify()

    def poke(self) -> None:
        """Have the thread read the clock now (tests that move an injected clock call it)."""
        with self._condition:
            self._condition.notify()

    @property
    def running(self) -> bool:
        """Whether the thread runs."""
        return self._thread is not None

    def stop(self, deadline: float = STOP_DEADLINE_SECS) -> bool:
        """End the thread (a later :meth:`arm` starts a new one); whether it ended within ``deadline``.

        Armed bells are marked rung: their cores read the clock again.
        """
        with self._condition:
            thread, self._thread = self._thread, None
            self._generation += 1
            for bell in self._bells:
                bell.rang = True
            self._condition.notify()
        if thread is None:
            return True
        thread.join(deadline)
        return not thread.is_alive()

    def _run(self, generation: int) -> None:
        with self._condition:
            while generation == self._generation:
                now, soonest = self.clock(), math.inf
                for bell in self._bells:
                    if bell.rang:
                        continue
                    if bell.at <= now:
                        bell.rang = True
                    elif bell.at < soonest:
                        soonest = bell.at
                self._wait(self._condition, None if soonest == math.inf else soonest - now)
