"""Which of a publisher's subscribers can be due, when the next one is, and the keys they need.

A :class:`Planner` owns one publisher's view of the subscribers: the ones its keys reach, the
passive observers, and the fetch-key union of a due set (cached per due set and per set of keys); it computes
the earliest step and time any of them is due. It is handed the subscribers and the keys; it
holds no bus and publishes nothing. :class:`hookbus.publisher_api.PublisherCore` keeps the two bounds it
returns as its own attributes, so that a step where nothing is due compares them without a call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hookbus._bus._subscription import Subscriber

__all__ = ["Plan", "Planner", "planned"]


class Plan:
    """What a publisher must fetch for one due step, handed back to :meth:`PublisherCore.publish_step`.

    Made by the core (:meth:`PublisherCore.plan`, :meth:`PublisherCore.final_plan`), which also
    keeps in it the subscribers it found due and the time it planned at: what a publisher
    reads is its step and its keys.

    Attributes:
        step: The step it was planned for.
        keys: The keys to fetch (the union of the due subscribers' keys, in declared order).
    """

    __slots__ = ("_due", "_now", "keys", "step")
    _due: list[Subscriber]
    _now: float

    def __init__(self, step: int, keys: tuple[str, ...]) -> None:
        self.step = step
        self.keys = keys

    def __repr__(self) -> str:
        return f"<Plan step={self.step} keys={self.keys}>"


def planned(step: int, keys: tuple[str, ...], due: list[Subscriber], now: float) -> Plan:
    """The core's :class:`Plan`: ``keys`` to fetch at ``step`` for the ``due`` subscribers,
    planned at ``now`` (the core reads ``due`` and ``now`` back when the plan returns)."""
    plan = Plan(step, keys)
    plan._due = due
    plan._now = now
    return plan


class Planner:
    """One publisher's scheduled subscribers, the bounds of their next due step and time, their keys.

    Args:
        keys: The publisher's fetch keys, in declared order (what a subscriber without keys gets).
        bus_keys: The keys as published on the bus (``eval/`` prefixed for an eval publisher).

    Attributes:
        subs: The subscribers with a ``before_run``/``after_run`` handler that want one of the keys.
        observers: The passive subscribers with an ``after_run`` handler.
        any_before: Whether one of ``subs`` listens to ``before_run``.
    """

    __slots__ = ("_bus_keys", "_by_due", "_cache", "_keys", "any_before", "observers", "subs")

    def __init__(self, keys: tuple[str, ...], bus_keys: frozenset[str]) -> None:
        self._keys = keys
        self._bus_keys = bus_keys
        self.subs: list[Subscriber] = []
        self.observers: list[Subscriber] = []  # passive subscribers: see what others are sent
        self.any_before = False
        self._cache: dict[frozenset[str], tuple[str, ...]] = {}  # one tuple per set of keys
        self._by_due: dict[tuple[Subscriber, ...], tuple[str, ...]] = {}  # and per due set, as planned

    def refresh(self, subscribers: list[Subscriber]) -> None:
        """Read the local ``subscribers`` (in dispatch order) anew: they changed."""
        self._cache.clear()
        self._by_due.clear()
        self.subs = [
            r
            for r in subscribers
            if ("after_run" in r.handlers or "before_run" in r.handlers) and r.wants(self._bus_keys)
        ]
        self.any_before = any("before_run" in r.handlers for r in self.subs)
        self.observers = [r for r in subscribers if r.passive and "after_run" in r.handlers]

    def find_next_due(self) -> tuple[float, float]:
        """The earliest step and time any enabled subscriber is due next (``inf``: none): what ``plan`` compares."""
        # Runs after every due step: one plain loop (no intermediate list, no generators).
        next_step = next_time = math.inf
        for record in self.subs:
            if record.disabled:
                continue
            timer = record.timer
            at_step, at_time = timer.next_step, timer.next_time
            if at_step < next_step:
                next_step = at_step
            if at_time < next_time:
                next_time = at_time
        return next_step, next_time

    def due(self, step: int, now: float) -> list[Subscriber]:
        """The enabled subscribers due at ``step`` at clock time ``now``, in dispatch order."""
        # One plain loop on every due step: a step rule is due from the timer's kept next_step on
        # (ScheduleTimer.is_due's step test); only a timer with a time rule is asked the whole rule.
        due, inf = [], math.inf
        for record in self.subs:
            if record.disabled:
                continue
            timer = record.timer
            if step >= timer.next_step or (timer.next_time != inf and timer.is_due(step, now)):
                due.append(record)
        return due

    def fetch_keys(self, due: Iterable[Subscriber]) -> tuple[str, ...]:
        """The keys the ``after_run`` listeners among ``due`` want, in declared order (all for one without keys)."""
        planned = tuple(due)  # a schedule brings the same few due sets back: each one's keys are kept
        keys = self._by_due.get(planned)
        if keys is None:
            if len(self._by_due) >= 64:  # time rules can mix the sets: keep the cache small
                self._by_due.clear()
            keys = self._by_due[planned] = self._union(planned)
        return keys

    def _union(self, due: tuple[Subscriber, ...]) -> tuple[str, ...]:
        wanted: set[str] = set()
        for record in due:
            if "after_run" not in record.handlers:
                continue
            if record.keys is None:
                return self._keys
            wanted |= record.keys
        frozen = frozenset(wanted)
        cached = self._cache.get(frozen)
        if cached is None:
            # Keep the declared order, so equal key sets always make the same fetch structure.
            cached = self._cache[frozen] = tuple(k for k in self._keys if k in frozen)
        return cached
