"""The stops alone, and agreed decisions across workers (a stop, a scripted learning rate), no bus."""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest

from hookbus import Task
from hookbus._bus._stops import Stops
from hookbus._contract._learning_rate import LearningRate, LearningRateChange, RateRequest
from hookbus._tf._agreement import AgreedDecision, Decided, agree
from hookbus._tf._collective import CollectiveStop
from hookbus.sink_api import StopRequest


class Recorder:
    """Plain collaborators of :class:`Stops`: a step, a clock, who is being called, a delivery."""

    def __init__(self) -> None:
        self.step = 3
        self.who: str | None = None
        self.published: list[StopRequest] = []
        self.stops = Stops(step=lambda: self.step, wall_clock=lambda: 50.0, who=lambda: self.who, deliver=self.deliver)

    def deliver(self) -> None:
        while self.stops.pending:
            self.published.append(self.stops.next_pending())


def test_each_request_keeps_its_reason_source_and_step_and_the_first_reason_wins() -> None:
    rec = Recorder()
    rec.stops.request("first")
    rec.who = "EarlyStoppingSink"
    rec.stops.request("second", step=9)
    rec.stops.request("third", source="cluster")
    assert rec.published == [
        StopRequest("first", "user", 3, 50.0),
        StopRequest("second", "EarlyStoppingSink", 9, 50.0),
        StopRequest("third", "cluster", 3, 50.0),
    ]
    assert rec.stops.requested
    assert rec.stops.reason == "first"
    rec.stops.reset()
    assert not rec.stops.requested
    assert rec.stops.reason is None


@pytest.mark.parametrize("reason", ["", None, 3])
def test_a_request_needs_a_reason(reason: Any) -> None:
    with pytest.raises(ValueError, match="reason must be a non-empty string"):
        Recorder().stops.request(reason)


def test_a_request_from_another_thread_is_recorded_and_acted_on_at_the_next_step() -> None:
    rec = Recorder()
    rec.stops.owner = threading.get_ident()  # a publisher began on this thread
    worker = threading.Thread(target=lambda: rec.stops.request("watchdog: stalled"), name="watchdog")
    worker.start()
    worker.join()
    assert rec.stops.requested
    assert rec.stops.reason == "watchdog: stalled"
    assert rec.published == []  # published only on the training thread
    reads: list[int] = []
    rec.stops.poll(lambda: reads.append(rec.step))
    assert rec.published == [StopRequest("watchdog: stalled", "thread watchdog", 3, 50.0)]
    assert reads == [3]
    rec.stops.poll(lambda: reads.append(rec.step))  # nothing new: ``before`` does not run
    assert reads == [3]


def test_a_signal_is_recorded_in_its_handler_and_requested_at_the_next_poll() -> None:
    rec = Recorder()
    rec.stops.from_signal(signal.SIGTERM)
    assert rec.stops.requested
    assert rec.stops.reason == "received SIGTERM"
    assert rec.published == []
    rec.stops.poll()
    assert rec.published == [StopRequest("received SIGTERM", "signal", 3, 50.0)]
    rec.stops.poll()
    assert len(rec.published) == 1


def test_a_watcher_is_polled_every_step_of_every_run() -> None:
    rec = Recorder()
    asks: list[tuple[str, str] | None] = [None, ("evaluator: no improvement", "evaluator")]
    rec.stops.watch(lambda: asks.pop(0) if asks else None)
    rec.stops.poll()
    assert rec.published == []
    rec.stops.reset()  # a new run keeps its watchers
    rec.stops.poll()
    assert rec.published == [StopRequest("evaluator: no improvement", "evaluator", 3, 50.0)]


def test_a_paced_watcher_is_polled_at_most_once_per_interval_and_watch_at_says_when_it_is_due() -> None:
    # Issue 30: a quiet step does not poll; it compares the clock with watch_at before the step
    # (PublisherCore.quiet). The evaluator's watcher reads its files once a second of the bus's clock.
    now = [10.0]
    polled: list[float] = []
    stops = Stops(step=lambda: 3, wall_clock=lambda: 50.0, who=lambda: None, deliver=lambda: None, clock=lambda: now[0])
    assert stops.watch_at == math.inf  # no watcher: a quiet step reads no clock for it

    def watcher() -> None:
        polled.append(now[0])

    stops.watch(watcher, every_secs=1.0)
    assert stops.watch_at == -math.inf  # due at the first step
    for t in (10.0, 10.5, 10.99, 11.0, 11.2, 12.5):
        now[0] = t
        stops.poll()
    assert polled == [10.0, 11.0, 12.5]
    assert stops.watch_at == 13.5
    stops.reset()  # a new run polls its watchers at its first step
    assert stops.watch_at == -math.inf
    now[0] = 13.6
    stops.poll()
    assert polled[-1] == 13.6
    assert stops.watch_at == pytest.approx(14.6)


class Workers:
    """``count`` in-process workers that sum lists of floats in lockstep (an all-reduce)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._barrier = threading.Barrier(count)
        self._shares: dict[int, list[float]] = {}
        self._lock = threading.Lock()

    def exchange(self, slot: int) -> Callable[[list[float]], list[float]]:
        def run(share: list[float]) -> list[float]:
            with self._lock:
                self._shares[slot] = share
            self._barrier.wait()
            total = [sum(values) for values in zip(*self._shares.values(), strict=True)]
            self._barrier.wait()
            return total

        return run

    def each(self, fn: Callable[[int], Any]) -> list[Any]:
        """Run ``fn(slot)`` on every worker at once; their results in slot order."""
        results: list[Any] = [None] * self.count
        errors: list[BaseException] = []

        def body(slot: int) -> None:
            try:
                results[slot] = fn(slot)
            except BaseException as error:  # surfaced below
                errors.append(error)
                self._barrier.abort()

        threads = [threading.Thread(target=body, args=(i,)) for i in range(self.count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return results


NAMES = ["worker-0", "worker-1", "worker-2"]


def test_a_learning_rate_decided_on_one_worker_applies_at_one_step_on_every_worker() -> None:
    workers = Workers(3)
    applied: list[list[Decided]] = [[], [], []]
    rates = [AgreedDecision("learning_rate", apply=applied[i].append, delay=5) for i in range(3)]
    rates[1].propose(0.01, reason="plateau on eval/loss", source="ReduceLROnPlateau", step=18)

    def round_at(step: int) -> Callable[[int], list[Decided]]:
        return lambda slot: agree([rates[slot]], workers.exchange(slot), slot=slot, names=NAMES, step=step)

    decided = workers.each(round_at(20))
    expected = Decided("learning_rate", 0.01, 25, ("worker-1",), 20)
    assert decided == [[expected]] * 3  # every worker settled on the same decision
    assert applied == [[], [], []]  # not before its step
    for step in (21, 24):
        assert [r.apply_due(step) for r in rates] == [None] * 3
    assert [r.apply_due(25) for r in rates] == [expected] * 3
    assert applied == [[expected]] * 3
    assert [r.apply_due(26) for r in rates] == [None] * 3  # once
    assert workers.each(round_at(30)) == [[], [], []]  # the proposal was spent


def test_reduced_values_combine_into_one_decision() -> None:
    workers = Workers(3)
    decisions = [AgreedDecision("learning_rate", combine=min) for _ in range(3)]
    decisions[0].propose(0.1, reason="a", source="chief", step=1)
    decisions[2].propose(0.05, reason="b", source="worker", step=1)
    decided = workers.each(
        lambda slot: agree([decisions[slot]], workers.exchange(slot), slot=slot, names=NAMES, step=10)
    )
    assert decided == [[Decided("learning_rate", 0.05, 10, ("worker-0", "worker-2"), 10)]] * 3


def test_a_delay_is_a_number_of_steps() -> None:
    with pytest.raises(ValueError, match="delay must be a non-negative int"):
        AgreedDecision("learning_rate", delay=-1)


class Strategy:
    """What :class:`CollectiveStop` reads of a ``MultiWorkerMirroredStrategy``: its cluster."""

    class cluster_resolver:  # noqa: N801 - the attribute's name in TensorFlow
        @staticmethod
        def cluster_spec() -> Any:
            class Spec:
                @staticmethod
                def as_dict() -> dict[str, list[str]]:
                    return {"worker": ["a:1", "b:2", "c:3"]}

            return Spec()


class Core:
    """What :class:`CollectiveStop` reads of a publisher's core: the stops, the sinks here, the rate."""

    def __init__(self, stops: Stops, rate: LearningRate | None = None) -> None:
        self.stops = stops
        self.learning_rate = rate
        self.changes: list[LearningRateChange] = []

    def local_subscribers(self) -> list[Any]:
        return []

    def apply_learning_rate(self, request: RateRequest, step: int) -> None:
        assert self.learning_rate is not None
        self.changes.append(self.learning_rate.apply(request, step))


class Rate:
    """A settable rate (a :class:`hookbus.publisher_api.RateBackend` without TensorFlow)."""

    scheduled = False

    def __init__(self) -> None:
        self.value = 0.1

    def read(self) -> float:
        return self.value

    def set_rate(self, rate: float) -> None:
        self.value = rate

    def set_multiplier(self, multiplier: float) -> None:
        raise AssertionError("not scheduled")


def test_a_rate_one_worker_asks_for_is_applied_by_every_worker_at_the_agreement_step() -> None:
    """Issue 27: worker 2 alone asks (its plateau sink, at step 13); the round at step 20 applies
    it on every worker, before step 21; a worker's own request keeps its reason and source."""
    workers = Workers(3)
    backends = [Rate() for _ in range(3)]
    rates = [LearningRate(b, publisher="LoopPublisher", who=lambda: "Plateau") for b in backends]
    for rate in rates:
        rate.local = False  # the agreement applies it
    cores = [Core(Recorder().stops, rate) for rate in rates]
    stops = [
        CollectiveStop(Strategy(), Task("worker", i, collective=True), 10, exchange=workers.exchange(i))
        for i in range(3)
    ]
    for stop in stops:
        stop.reset(0)
    rates[2].request(rate=0.01, reason="eval/loss did not improve")
    workers.each(lambda slot: stops[slot].agree(cores[slot], 20))  # type: ignore[arg-type]
    assert [b.value for b in backends] == [0.01] * 3
    assert [c.changes for c in cores[:2]] == [[LearningRateChange(0.1, 0.01, 1.0, 20, "worker-2 asked", "cluster")]] * 2
    assert cores[2].changes == [LearningRateChange(0.1, 0.01, 1.0, 20, "eval/loss did not improve", "Plateau")]
    assert [r.pending for r in rates] == [None] * 3
    workers.each(lambda slot: stops[slot].agree(cores[slot], 30))  # type: ignore[arg-type]
    assert [len(c.changes) for c in cores] == [1, 1, 1]  # spent: each round is a fresh vote


def test_a_stop_on_one_worker_is_agreed_by_every_worker_at_the_same_step() -> None:
    workers = Workers(3)
    recs = [Recorder() for _ in range(3)]
    stops = [
        CollectiveStop(Strategy(), Task("worker", i, collective=True), 10, exchange=workers.exchange(i))
        for i in range(3)
    ]
    for stop in stops:
        stop.reset(0)
    recs[2].stops.request("NanGuardSink: loss is nan")  # worker 2 alone asks, at step 3
    assert [s.due(9) for s in stops] == [False] * 3
    assert [s.due(10) for s in stops] == [True] * 3
    agreed = workers.each(lambda slot: stops[slot].agree(Core(recs[slot].stops), 10))  # type: ignore[arg-type]
    assert agreed == [True] * 3
    for rec in recs[:2]:
        assert rec.published == [StopRequest("worker-2 stopped", "cluster", 10, 50.0)]
    assert recs[2].published == [StopRequest("NanGuardSink: loss is nan", "user", 3, 50.0)]  # not echoed


class Planned:
    """A subscriber record whose sink plans a last step (a StopAtStepSink's ``total_steps``)."""

    def __init__(self, total: int | None) -> None:
        self.sink = type("Sink", (), {"total_steps": total})()


class PlanningCore(Core):
    def __init__(self, stops: Stops, total: int | None) -> None:
        super().__init__(stops)
        self.total = total

    def local_subscribers(self) -> list[Any]:
        return [Planned(self.total)]


@pytest.mark.parametrize(("totals", "agreed_at"), [((40, 40, 40), 40), ((40, 40, 50), None), ((40, None, 40), None)])
def test_a_last_step_every_worker_plans_is_agreed_at_begin(
    totals: tuple[int | None, ...], agreed_at: int | None
) -> None:
    workers = Workers(3)
    recs = [Recorder() for _ in range(3)]
    stops = [
        CollectiveStop(Strategy(), Task("worker", i, collective=True), 100, exchange=workers.exchange(i))
        for i in range(3)
    ]
    for stop in stops:
        stop.reset(0)
    cores = [PlanningCore(recs[i].stops, totals[i]) for i in range(3)]
    assert workers.each(lambda slot: stops[slot].agree(cores[slot], 0, plan=True)) == [False] * 3  # type: ignore[arg-type]
    assert [s.due(35) for s in stops] == [False] * 3
    assert [s.due(40) for s in stops] == [agreed_at == 40] * 3
    assert all(rec.published == [] for rec in recs)
