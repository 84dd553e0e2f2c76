"""Throughput beyond steps per second: examples trained, and the time spent outside the steps.

A :class:`Throughput` belongs to one training publisher's core. It measures nothing on a quiet step:

- **Examples** come from counts, not from the clock: the publisher hands it a counter, a function of
  the step that returns the examples trained since its session began (a declared batch size times
  the steps, a short last batch counted by what the framework knows of it; see each publisher). It
  is called on due steps only, and its count rides on the step's event (``Event.examples``).
- **Time outside the step** is measured on a sampled subset of steps: each due step and the step
  after it. A due step's subscribers' start and end are the readings the dispatcher takes anyway to
  time each call (no clock read of its own on a due step; the values' conversion just before the
  dispatch, a microsecond or two, counts as the step's), or, on a bus that runs on a clock of its
  own (``EventBus(clock=...)``, a test's), two readings of that clock; a publisher that sees the framework's
  step begin (the TF1 hook's ``before_run``, Keras's ``on_train_batch_begin``) reads the clock once at
  the start of the next step, while :attr:`gap_open` says a gap is being measured. That gap is the
  time outside after a due step (its subscribers and the loop around the step); the gap less the
  subscribers' time is a sample of the loop's own time between two steps, which stands for each
  quiet step's gap until the next sample (a moving average of the samples). A publisher that does
  not see the step begin (the loop publisher, whose step is the user's own code, unless the loop calls
  ``step_begins()``) counts the subscribers' time alone. A replay publishes the figures its log
  recorded (:attr:`Throughput.recorded`), measuring nothing. The running total rides on each due
  step's event (``Event.outside_secs``); over a span, its difference over the steps between is the
  time outside per step.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

__all__ = ["ExampleCounter", "Throughput"]

#: Counts the examples trained since the session began, through a training step: ``None`` when not known.
ExampleCounter = Callable[[int], "int | None"]

#: Weight of a new sample of the loop's time between two steps in its moving average.
_LOOP_WEIGHT = 0.25


class Throughput:
    """One training publisher's examples and time outside its steps (see the module).

    Args:
        clock: ``None`` (a bus on its default clock): measure on :func:`time.perf_counter`, with the
            dispatcher's readings of each due step's subscribers (:meth:`dispatched`'s arguments).
            A clock (a bus's ``EventBus(clock=...)``): read it around the subscribers instead,
            since the dispatcher's readings are not on it.

    Attributes:
        counter: The publisher's example counter, or ``None``: examples not known.
        sees_start: Whether the publisher calls :meth:`step_starts` at a step's start while
            :attr:`gap_open` (a publisher sets it once, before training).
        origin: The step the session began at (the last resume point): a counter's zero.
        gap_open: Whether the last due step's gap waits for the next step's start to be read.
        outside: Seconds outside the steps since the session began, up to the last due step's start.
        recorded: The figures of the step being replayed from a log (examples, seconds outside), which
            :meth:`due` returns as they were recorded, measuring nothing; ``None`` (default): measure.
    """

    __slots__ = (
        "_dispatch",
        "_ended",
        "_gap",
        "_last_due",
        "_loop",
        "_reads",
        "clock",
        "counter",
        "gap_open",
        "origin",
        "outside",
        "recorded",
        "sees_start",
    )

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._reads = clock is not None  # the dispatcher's readings are on another clock
        self.clock: Callable[[], float] = perf_counter if clock is None else clock
        self.counter: ExampleCounter | None = None
        self.sees_start = False
        self.recorded: tuple[int | None, float | None] | None = None
        self.reset()

    def reset(self, origin: int = 0) -> None:
        """A session began at step ``origin`` (or the step went back to it): the totals start anew."""
        self.origin = origin
        self.outside = 0.0
        self.gap_open = False
        self._last_due: int | None = None  # the last due step (None: none yet in this session)
        self._ended = 0.0  # when that step's subscribers began (its framework step had ended)
        self._dispatch = 0.0  # how long its subscribers took
        self._gap: float | None = None  # the time outside after it, once the next step began
        self._loop: float | None = None  # the loop's own time between two steps (moving average)

    def step_starts(self) -> None:
        """A training step begins, while :attr:`gap_open`: the gap after the last due step ends now."""
        gap = self.clock() - self._ended
        self.gap_open = False
        self._gap = gap
        sample = gap - self._dispatch if gap > self._dispatch else 0.0
        loop = self._loop
        self._loop = sample if loop is None else loop + _LOOP_WEIGHT * (sample - loop)

    def due(self, step: int) -> tuple[int | None, float | None]:
        """A due step's framework step ended at ``step``, before its subscribers run: its examples
        (the counter's) and the seconds outside the steps up to its start."""
        recorded = self.recorded
        if recorded is not None:
            return recorded
        last, self._last_due = self._last_due, step
        if last is not None and step > last:
            loop, gap = self._loop, self._gap
            if gap is None:  # the next step's start was not seen: its subscribers, and the loop's estimate
                gap = self._dispatch if loop is None else self._dispatch + loop
            self.outside += gap if loop is None or step == last + 1 else gap + (step - last - 1) * loop
        self._gap = None
        self.gap_open = False
        if self._reads:
            self._ended = self.clock()
        counter = self.counter
        return (None if counter is None else counter(step)), self.outside

    def dispatched(self, began: float, ended: float) -> None:
        """The due step's subscribers, which began at ``began`` and returned at ``ended`` (the
        dispatcher's :func:`time.perf_counter` readings), have run: their time is known; the gap
        after them opens."""
        if self.recorded is not None:
            return
        if self._reads:
            self._dispatch = self.clock() - self._ended
        else:
            self._ended, self._dispatch = began, ended - began
        self.gap_open = self.sees_start
