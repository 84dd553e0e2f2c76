"""A small sweep written as the sinks write it, for ``hookbus replay DIR`` (issue 49 item 4).

Three runs under ``runs/``: ``lr-0.1`` and ``lr-0.3`` (one log each) and ``cluster`` (two workers'
logs, ``events.worker-0.jsonl`` the chief's), each a scripted training of 30 steps with an
evaluation every 10, its own hyper-parameters and its own start time, written by ``EventLogSink``
(with its summary beside it). :func:`points` reads what a log holds, by the tests' own rule.
"""

from __future__ import annotations

from pathlib import Path

import hookbus
from hookbus.sinks import EventLogSink
from hookbus.testing import FakeClock, ScriptedPublisher

__all__ = ["LAST", "RUNS", "chief_log", "points", "sweep", "train"]

LAST = 30
#: name -> (learning rate, workers, start time)
RUNS: dict[str, tuple[float, int, float]] = {
    "lr-0.1": (0.1, 1, 1_796_000_000.125),
    "lr-0.3": (0.3, 1, 1_796_003_600.5),
    "cluster": (0.2, 2, 1_796_007_200.25),
}


def train(log: Path, lr: float, start: float, *, task: hookbus.Task | None = None) -> None:
    """A scripted training of :data:`LAST` steps at ``lr``, recorded in ``log`` (a worker's, with ``task``)."""
    clock = FakeClock(start=start)
    bus = hookbus.EventBus(clock=clock, wall_clock=clock, handle_signals=False)
    index = task.index if task is not None else 0
    hparams: dict[str, float | int | str] = {
        "lr": lr,
        "optimizer": "sgd",
        "workers": RUNS_WORKERS.get(log.parent.name, 1),
    }
    bus.attach(EventLogSink(log, hparams=hparams, runs_on="each"))
    bus.on("after_run", lambda event: None)  # a subscriber due at every step: the log records each
    pub = ScriptedPublisher(bus, keys=["loss", "accuracy"], task=task)
    evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval", task=task)
    with bus:
        pub.begin()
        evaluate.begin()
        pub.session(0)
        for step in range(1, LAST + 1):
            clock.advance(0.0125 * (1 + step % 3))
            pub.advance({"loss": 1.0 / (1 + lr * step) + 0.001 * index, "accuracy": step / (step + 1.0 + lr)})
            if step % 10 == 0:
                evaluate.evaluate({"loss": 1.2 / (1 + lr * step)}, step=step)
        pub.end()


RUNS_WORKERS = {name: workers for name, (_, workers, _) in RUNS.items()}


def sweep(root: Path) -> Path:
    """The three runs under ``root / "runs"``; that directory."""
    runs = root / "runs"
    for name, (lr, workers, start) in RUNS.items():
        if workers == 1:
            train(runs / name / "events.jsonl", lr, start)
            continue
        for index in range(workers):
            train(runs / name / "events.jsonl", lr, start + index * 0.001, task=hookbus.Task("worker", index))
    return runs


def chief_log(runs: Path, name: str) -> Path:
    """The log a run is replayed from: its one log, or its chief's (worker 0)."""
    one = runs / name / "events.jsonl"
    return one if one.exists() else runs / name / "events.worker-0.jsonl"


def points(log: Path, mode: str = "train") -> dict[str, list[tuple[int, float]]]:
    """``key -> [(step, value)]`` of ``mode``'s step records in ``log`` (eval keys without ``eval/``)."""
    found: dict[str, list[tuple[int, float]]] = {}
    for record in hookbus.read_event_log(log):
        if record["record"] != "step" or record.get("mode") != mode or record.get("final"):
            continue
        for key, value in record["values"].items():
            found.setdefault(key, []).append((record["step"], value))
    return found
