"""When a subscriber is due: step multiples, wall-clock intervals, begin and end."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hookbus._rules._validate import flag, optional_seconds, positive_int

__all__ = ["Schedule"]


def _check_steps(value: object) -> int | None:
    return None if value is None else positive_int("every_n_steps", value)


@dataclass(frozen=True)
class Schedule:
    """A subscriber's schedule over training steps.

    Args:
        every_n_steps: Due when the step reaches a new multiple of ``n``: ``step // n`` grew
            since the subscriber last fired (so a step that jumps past several multiples fires
            once). Default ``None`` (off).
        every_n_secs: Due at the first step seen, then once this many seconds have passed since
            it last fired. Default ``None`` (off). With both, whichever comes first.
        at_begin: Also due at the first training step of each session. Default ``False``.
        at_end: Also due once at the end, with the final values, unless it already fired at the
            final step. Default ``False``.
        secs_from_session_start: Count ``every_n_secs`` from the start of each session instead of
            firing at its first step. Default ``False``; ``CheckpointSink`` uses it, so a fresh
            start or a resume does not save just because a timer began.
        steps_from_last_firing: Count ``every_n_steps`` as TensorFlow's hooks count theirs
            (``SecondOrStepTimer``): due at the first step of each session, then once ``n`` steps
            have passed since it last fired (steps ``1, 1 + n, 1 + 2n, ...`` from a fresh start),
            instead of at the multiples of ``n``. Default ``False``; :func:`hookbus.from_hooks`
            uses it, so converted hooks write at the hooks' steps. With ``secs_from_session_start``
            the steps count from the session's start step too (``CheckpointSaverHook``'s rule: a
            session starting at S is due at S + n), so a session's first step is not due.

    Raises:
        ValueError: naming the argument and the value, when a value is invalid.
    """

    every_n_steps: int | None = None
    every_n_secs: float | None = None
    at_begin: bool = False
    at_end: bool = False
    secs_from_session_start: bool = False
    steps_from_last_firing: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "every_n_steps", _check_steps(self.every_n_steps))
        object.__setattr__(self, "every_n_secs", optional_seconds("every_n_secs", self.every_n_secs))
        flag("at_begin", self.at_begin)
        flag("at_end", self.at_end)
        flag("secs_from_session_start", self.secs_from_session_start)
        flag("steps_from_last_firing", self.steps_from_last_firing)

    @property
    def is_empty(self) -> bool:
        """True when the schedule never fires on a step (only, perhaps, at the end)."""
        return self.every_n_steps is None and self.every_n_secs is None and not self.at_begin

    def timer(self) -> ScheduleTimer:
        """A fresh, mutable tracker of when this schedule last fired."""
        return ScheduleTimer(self)


class ScheduleTimer:
    """Mutable state of one schedule: which step multiple and time it last fired at.

    The decisions are pure reads (:meth:`is_due`, :attr:`next_step`, :attr:`next_time`);
    :meth:`fire` and :meth:`reset` are the only writes.

    Attributes:
        next_step: The smallest step at which a step rule could make it due (``inf`` if none,
            ``-inf`` while the begin firing is owed); kept by the writes, read after every due step.
        next_time: The earliest clock time at which the time rule could make it due (``inf``
            without one, ``-inf`` before it first fired).
    """

    __slots__ = ("_begin_pending", "_bucket", "_last_step", "_last_time", "next_step", "next_time", "schedule")

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self._bucket = 0
        self._last_time: float | None = None
        self._last_step: int | None = None
        self._begin_pending = schedule.at_begin
        self._bounds()

    def _bounds(self) -> None:
        """:attr:`next_step` and :attr:`next_time` from the state just written."""
        s = self.schedule
        n, secs = s.every_n_steps, s.every_n_secs
        from_last = s.steps_from_last_firing and n is not None
        if self._begin_pending or (from_last and self._last_step is None and not s.secs_from_session_start):
            self.next_step: float = -math.inf
        elif from_last and self._last_step is not None:
            self.next_step = self._last_step + n  # type: ignore[operator]
        else:  # the multiples; also a session-start count whose session is not known yet (not reset)
            self.next_step = (self._bucket + 1) * n if n is not None else math.inf
        if secs is None:
            self.next_time: float = math.inf
        else:
            self.next_time = -math.inf if self._last_time is None else self._last_time + secs

    def reset(self, step: int, now: float | None = None) -> None:
        """Start counting from ``step`` (a new session, possibly rewound) at clock time ``now``."""
        n = self.schedule.every_n_steps
        self._bucket = step // n if n else 0
        self._begin_pending = self.schedule.at_begin
        if self.schedule.steps_from_last_firing:
            # TensorFlow's timers fire at a session's first step, or (the checkpoint hook's) count from its start.
            self._last_step = step if self.schedule.secs_from_session_start else None
        elif self._last_step is not None and self._last_step > step:
            self._last_step = None
        if self.schedule.secs_from_session_start and now is not None:
            self._last_time = now  # the time rule counts from here, not from the first step
        self._bounds()

    def is_due(self, step: int, now: float) -> bool:
        """Whether the subscriber should fire at ``step`` (at clock time ``now``)."""
        s = self.schedule
        if self._begin_pending:
            return True
        n, last = s.every_n_steps, self._last_step
        if n is not None and s.steps_from_last_firing and (last is not None or not s.secs_from_session_start):
            if last is None or step >= last + n:
                return True
        elif n is not None and step // n > self._bucket:
            return True
        if s.every_n_secs is not None:
            return self._last_time is None or now - self._last_time >= s.every_n_secs
        return False

    def is_due_at_end(self, step: int) -> bool:
        """Whether the at-end firing is still owed at final step ``step``."""
        return self.schedule.at_end and self._last_step != step

    def fire(self, step: int, now: float) -> None:
        """Record that the subscriber fired at ``step`` and ``now``."""
        n = self.schedule.every_n_steps
        if n is not None:
            self._bucket = max(self._bucket, step // n)
        self._last_time = now
        self._last_step = step
        self._begin_pending = False
        self._bounds()
