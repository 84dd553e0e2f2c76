"""The learning-rate sinks' cost on due steps, for ``bench/dispatch.py``: microseconds per step on
the training thread through the real publish path with a rate offered, every step due."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import hookbus
from hookbus._publishing._publisher import PublisherCore
from hookbus.sinks import LearningRateSchedulerSink, ReduceLROnPlateauSink


class _Rate:
    """A settable rate held in Python (a ``RateBackend``): the sinks' cost, not a backend's."""

    scheduled = False

    def __init__(self) -> None:
        self.rate = 1e-3

    def read(self) -> float:
        return self.rate

    def set_rate(self, rate: float) -> None:
        self.rate = rate

    def set_multiplier(self, multiplier: float) -> None:
        raise AssertionError("a settable rate")


def _noop(event: Any) -> None:
    return None


#: What each case attaches: the reference (one no-op function due every step) and each sink.
CASES: dict[str, Callable[[hookbus.EventBus], object]] = {
    "no-op function": lambda bus: bus.on("after_run", _noop, every_n_steps=1),
    # A plateau: the same loss every step, counted, never reaching the patience.
    "ReduceLROnPlateauSink": lambda bus: bus.attach(
        ReduceLROnPlateauSink(monitor="loss", patience=10**9, every_n_steps=1)
    ),
    # A constant schedule: called every step, no request.
    "LearningRateSchedulerSink": lambda bus: bus.attach(LearningRateSchedulerSink(lambda s, lr: lr, per="step")),
}


class _Case:
    """One bus with one case attached and a publisher core offering a rate, inside ``with bus:``."""

    def __init__(self, attach: Callable[[hookbus.EventBus], object], keys: tuple[str, ...]) -> None:
        self.bus = hookbus.EventBus()
        attach(self.bus)
        self.core = PublisherCore(self.bus, keys)
        self.core.offer_learning_rate(_Rate())
        self.bus.__enter__()
        self.core.begin()
        self.core.session_created(0)
        self.step = 0

    def steps(self, count: int, raw: Mapping[str, Any]) -> None:
        plan, publish, advance, poll = self.core.plan, self.core.publish_step, self.core.advance, self.core.should_stop
        step = self.step
        for _ in range(count):
            step += 1
            due = plan(step)
            if due is not None:
                publish(due, step, raw)
            else:
                advance(step)
            poll()
        self.step = step

    def close(self) -> None:
        self.core.end(self.step)
        self.bus.__exit__(None, None, None)


def measure_rate_sinks(rounds: int, steps: int, raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """µs per due step of each case (min and median over interleaved rounds); ``raw`` is a step's values."""
    cases = {name: _Case(attach, tuple(raw)) for name, attach in CASES.items()}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for case in cases.values():
        case.steps(max(steps // 10, 10), raw)  # warm-up
    names = list(cases)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            cases[name].steps(steps, raw)
            times[name].append((time.perf_counter() - start) / steps * 1e6)
    for case in cases.values():
        case.close()
    return [{"subscriber": n, "due_min_us": min(t), "due_median_us": statistics.median(t)} for n, t in times.items()]
