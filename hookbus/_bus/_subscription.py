"""The bus's record of one subscriber: what it handles, when, and how its failures are handled."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hookbus._contract._schedule import Schedule, ScheduleTimer
from hookbus._contract._stats import Usage

if TYPE_CHECKING:
    from hookbus._bus._offthread import OffThread
    from hookbus._contract._sink import Sink

__all__ = ["Subscriber"]


class Subscriber:
    """The bus's record of one subscriber (a sink or a function): what, when, how."""

    __slots__ = (
        "disabled",
        "epochs",
        "errors",
        "handlers",
        "keys",
        "name",
        "on_error",
        "order",
        "passive",
        "priority",
        "runs_on",
        "sink",
        "steers",
        "timer",
        "usage",
        "worker",
    )

    def __init__(
        self,
        *,
        name: str,
        handlers: dict[str, Callable[[Any], None]],
        schedule: Schedule,
        keys: frozenset[str] | None,
        priority: int,
        on_error: str,
        order: int,
        sink: Sink | None = None,
        runs_on: str = "all",
        worker: OffThread | None = None,
    ) -> None:
        self.name = name
        #: A function subscriber's own thread (``bus.on(..., background=True)``), else ``None``.
        self.worker = worker
        self.runs_on = runs_on
        self.handlers = handlers
        self.timer: ScheduleTimer = schedule.timer()
        self.keys = keys
        self.priority = priority
        self.on_error = on_error
        self.order = order
        self.sink = sink
        self.errors = 0
        self.disabled = False
        self.usage = Usage()  # timed by the dispatcher; see hookbus.EventBus.stats
        self.epochs = sink.receives_epochs if sink is not None else False
        self.passive = sink.passive if sink is not None else False
        # A sink that steers training (stops it, guards it, sets its rate) or saves its checkpoints:
        # a test evaluation (``mode="test"``) never reaches it.
        self.steers = sink is not None and (sink.controls_training or sink.checkpoint_directory is not None)

    # -- its health: written here only (the dispatcher, the barrier and the roster ask) ---------
    def failed(self, *, disable: bool) -> None:
        """Count one failure of this subscriber in this run, and stop calling it when ``disable``."""
        self.errors += 1
        if disable:
            self.disabled = True

    def start_run(self) -> None:
        """A run begins: a fresh timer, no failures, enabled again, its usage from zero."""
        self.timer = self.timer.schedule.timer()
        self.errors, self.disabled = 0, False
        self.usage = Usage()
        if self.worker is not None:
            self.worker.new_run()

    @property
    def sort_key(self) -> tuple[int, int]:
        return (self.priority, self.order)

    def wants(self, keys: frozenset[str]) -> bool:
        """Whether an event carrying ``keys`` concerns this subscriber: it is planned and fetched
        for. Never for a passive one, which only observes what is published for others. An empty
        ``keys`` (a sink that needs the step, not values) wants every event and adds no key to a fetch."""
        return not self.passive and (self.keys is None or not self.keys or not self.keys.isdisjoint(keys))

    def wants_tests(self, keys: frozenset[str]) -> bool:
        """Whether a test evaluation (``mode="test"``, ``test/<name>`` keys: ``model.evaluate`` outside
        ``fit``) reaches this subscriber.

        The one rule: it handles ``after_run``, is not disabled, does not steer training (a sink with
        ``controls_training``, or one that saves checkpoints: checkpoints, early stopping, the NaN
        guard, stop-at-step, the learning rate ignore test evaluations), and either wants every key
        (``keys=None``), names a ``test/`` key, or observes (``passive``: the event log).
        """
        if "after_run" not in self.handlers or self.disabled or self.steers:
            return False
        return self.passive or self.keys is None or not self.keys.isdisjoint(keys)

    def wants_epochs(self, keys: frozenset[str]) -> bool:
        """Whether an epoch event (``mode="epoch"``, ``epoch/<name>`` keys) reaches this subscriber.

        The one rule: it must handle ``after_run`` and opt in, either by naming an ``epoch/``
        key in ``keys`` or by being a sink whose ``receives_epochs`` is true (whatever its
        keys: early stopping hears each epoch end to report a monitor that never came).
        Everything else never sees epoch events.
        """
        if "after_run" not in self.handlers or self.disabled:
            return False
        return self.epochs or (self.keys is not None and not self.keys.isdisjoint(keys))
