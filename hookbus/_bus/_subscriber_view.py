"""What the bus hands out of its records of subscribers: a read-only view of each."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookbus._bus._subscription import Subscriber
    from hookbus._contract._sink import Sink

__all__ = ["SubscriberView", "views"]


class SubscriberView:
    """One subscriber as the bus has it (``bus.subscribers``, ``PublisherCore.local_subscribers()``).

    Read-only and live: its counters follow the bus's record (``errors``, ``disabled``), and no
    attribute can be set, so what reads it cannot change how the bus dispatches. Made by the bus
    only: it has no public constructor, so the bus's record behind it stays private.
    """

    __slots__ = ("_record",)
    _record: Subscriber

    def __init__(self) -> None:
        raise TypeError(
            "a SubscriberView is made by the bus: read bus.subscribers or PublisherCore.local_subscribers()"
        )

    def __repr__(self) -> str:
        return f"<subscriber {self.name!r} priority={self.priority}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SubscriberView) and other._record is self._record

    def __hash__(self) -> int:
        return id(self._record)

    @property
    def name(self) -> str:
        """The subscriber's name (a sink's ``name``, a function's qualified name)."""
        return self._record.name

    @property
    def sink(self) -> Sink | None:
        """The sink, or ``None`` for a function subscriber."""
        return self._record.sink

    @property
    def keys(self) -> frozenset[str] | None:
        """The keys it asked for (``None``: every key)."""
        return self._record.keys

    @property
    def priority(self) -> int:
        """Its priority (lower runs first)."""
        return self._record.priority

    @property
    def runs_on(self) -> str:
        """Which tasks run it (``"all"``, ``"chief"``, ``"each"``, ...)."""
        return self._record.runs_on

    @property
    def on_error(self) -> str:
        """What a failure of it does: ``"raise"``, ``"isolate"`` or ``"disable"``."""
        return self._record.on_error

    @property
    def errors(self) -> int:
        """How many of its calls failed."""
        return self._record.errors

    @property
    def disabled(self) -> bool:
        """Whether a failure disabled it (``on_error="disable"``)."""
        return self._record.disabled

    @property
    def passive(self) -> bool:
        """Whether it only observes what is published for others (:attr:`hookbus.sink_api.Sink.passive`)."""
        return self._record.passive

    @property
    def background(self) -> bool:
        """Whether it runs on a thread of its own (``bus.on(..., background=True)``)."""
        return self._record.worker is not None

    @property
    def handlers(self) -> Mapping[str, Callable[[Any], None]]:
        """Its handler for each signal it handles (a read-only mapping)."""
        return MappingProxyType(self._record.handlers)

    def wants(self, keys: frozenset[str]) -> bool:
        """Whether an event carrying ``keys`` concerns it (it is planned and fetched for)."""
        return self._record.wants(keys)


def views(records: list[Subscriber]) -> list[SubscriberView]:
    """A fresh list of read-only views of ``records``, in their order."""
    made = []
    for record in records:
        view = object.__new__(SubscriberView)
        view._record = record
        made.append(view)
    return made
