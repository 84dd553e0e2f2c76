"""Replay a recorded run (an ``EventLogSink`` log) on any bus, through the publishers' own core.

A replay publisher is one more publisher on :class:`hookbus.publisher_api.PublisherCore`: the recorded train
steps are planned with the bus's schedules exactly as live steps are (a subscriber due at a step
the log holds receives that step's values), evaluations and epoch events are published as
recorded, and sessions and ends follow the log. The bus's clocks read the recorded times while
it replays, so events carry the recorded wall times and time schedules count recorded seconds.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hookbus._contract._event_log import iter_event_log, iter_event_log_shapes
from hookbus._contract._publisher_keys import EPOCH_PREFIX, EVAL_PREFIX, TEST_PREFIX
from hookbus._contract._system import SYSTEM_NOTICE_KEY
from hookbus._publishing._publisher import PublisherCore

if TYPE_CHECKING:
    from hookbus._bus._bus import EventBus

__all__ = ["FollowedReplay", "ReplayResult", "recorded_run_key", "replay"]


@dataclass(frozen=True)
class ReplayResult:
    """What :func:`replay` did.

    Attributes:
        steps: Train step records replayed (each planned against the bus's schedules).
        last_step: The last training step reached.
        stopped: Whether a subscriber of the replaying bus asked to stop before the log ended.
        stop_step: The step at which it asked (``None`` when it did not).
        stop_reason: Its reason (``None`` when it did not).
    """

    steps: int
    last_step: int
    stopped: bool
    stop_step: int | None
    stop_reason: str | None


class _RecordedClock:
    """Reads the time of the record being replayed (both the monotonic and the wall clock)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def _recorded_time(core: PublisherCore, clock: _RecordedClock | None = None) -> Iterator[_RecordedClock]:
    bus = core.bus
    clock = clock or _RecordedClock()
    saved = bus.clock, bus.wall_clock
    bus.clock = bus.wall_clock = clock
    try:
        # A run on recorded time samples no machine: the log's own samples are of the machine that
        # trained (they are replayed, as recorded); this one's (the replaying process's, at replay
        # time) would be false.
        with core.without_sampling():
            yield clock
    finally:
        bus.clock, bus.wall_clock = saved


def _keys(
    records: Iterable[dict[str, Any]],
) -> tuple[list[str], list[str], list[str], list[str], dict[str, tuple[int | None, ...]]]:
    """Train, eval (without ``eval/``), test (without ``test/``) and epoch keys, and shapes by bus key,
    from the log."""
    known: dict[str, None] = {}
    shapes: dict[str, tuple[int | None, ...]] = {}
    for record in records:
        if record["record"] == "begin":
            known.update(dict.fromkeys(record.get("keys") or ()))
            for key, shape in (record.get("shapes") or {}).items():
                if shape is not None:
                    shapes[key] = tuple(shape)
        elif record["record"] == "step":  # what a begin did not declare (Keras's epoch metrics) still replays
            known.update(
                dict.fromkeys(k for k in record["values"] if record["mode"] != "epoch" or k.startswith(EPOCH_PREFIX))
            )
    train = [k for k in known if not k.startswith((EVAL_PREFIX, EPOCH_PREFIX, TEST_PREFIX))]
    evaluated = [k[len(EVAL_PREFIX) :] for k in known if k.startswith(EVAL_PREFIX)]
    tested = [k[len(TEST_PREFIX) :] for k in known if k.startswith(TEST_PREFIX)]
    epoch = [k for k in known if k.startswith(EPOCH_PREFIX)]
    return train, evaluated, tested, epoch, shapes


class _Replayer:
    """Publishes one log's records on ``bus`` (inside a run)."""

    def __init__(self, bus: EventBus, records: Iterable[dict[str, Any]]) -> None:
        train, evaluated, tested, epoch, shapes = _keys(records)
        self.bus = bus
        self.train = PublisherCore(bus, train)
        self.train.shapes = {k: s for k, s in shapes.items() if k in train}
        self.eval = PublisherCore(bus, evaluated, mode="eval") if evaluated else None
        if self.eval is not None:
            self.eval.shapes = {k: s for k, s in shapes.items() if k.startswith(EVAL_PREFIX)}
        # Test evaluations (model.evaluate outside fit) as they were: test/ keys, no session.
        self.test = PublisherCore(bus, tested, mode="test") if tested else None
        # Epoch keys are known to the bus through a core of their own; it only publishes epochs.
        self.epoch = PublisherCore(bus, epoch) if epoch else None
        self.begun = False
        self.in_session = False
        self.final: tuple[int, Mapping[str, Any]] | None = None
        self.steps = 0

    def run(self, clock: _RecordedClock, records: Iterable[dict[str, Any]]) -> bool:
        """Replay every record until the log ends or the bus stops; whether it stopped."""
        for record in records:
            if self.feed(record, clock):
                return True
        self.cut_short()
        return False

    def cut_short(self) -> None:
        """End a session the log leaves open (a kill, a log still being written)."""
        if self.in_session:
            self._end(self.bus.step)

    def knows(self, record: dict[str, Any]) -> bool:
        """Whether the keys this replayer declared cover ``record``'s values."""
        if record["record"] != "step" or record.get("final"):
            return True
        mode = record.get("mode", "train")
        core = {"eval": self.eval, "test": self.test, "epoch": self.epoch}.get(mode, self.train)
        return core is not None and all(key in core.bus_keys for key in record["values"])

    def feed(self, record: dict[str, Any], clock: _RecordedClock) -> bool:
        """Publish one record (its time on the recorded clock); whether the bus asked to stop."""
        clock.now = float(record.get("wall_time") or clock.now)
        kind, mode, step = record["record"], record.get("mode", "train"), record.get("step")
        if kind == "begin" or (not self.begun and kind in ("session_created", "step")):
            self.begun = True
            if mode in ("eval", "test"):  # an evaluation begins on its own (a test one also without a begin record)
                core = self.eval if mode == "eval" else self.test
                if core is not None and (kind == "begin" or mode == "test"):
                    core.begin()
            else:
                self.train.begin()
            if kind == "begin":
                return False
        if kind == "session_created" and isinstance(step, int):
            if mode == "train":
                self.train.session_created(step, bool(record.get("restored")))
                self.in_session = True
                if self.train.should_stop():
                    return self._stop()
            elif self.eval is not None:
                self.eval.session_created(step, bool(record.get("restored")))
        elif kind == "waiting_for_step" and isinstance(step, int) and self.in_session:
            self.train.publish_waiting(
                record["state"],
                until_step=int(record["until_step"]),
                step=step,
                waited_secs=float(record["waited_secs"]),
                timeout_secs=record.get("timeout_secs"),
                starts=bool(record.get("starts")),
            )
        elif kind == "step" and isinstance(step, int) and self._step(record, mode, step):
            return self._stop()
        elif kind == "system" and isinstance(step, int) and self.begun:
            values: dict[str, Any] = {k: v for k, v in record["values"].items() if isinstance(v, float)}
            if isinstance(record.get("notice"), str):
                values[SYSTEM_NOTICE_KEY] = record["notice"]
            self.train.publish_system(step, values)
        elif kind == "end" and isinstance(step, int):
            if mode == "train" and self.in_session:
                self._end(step)
            elif mode == "eval" and self.eval is not None:
                self.eval.end(step)
            elif mode == "test" and self.test is not None:
                self.test.end(step)
        return False

    def _step(self, record: dict[str, Any], mode: str, step: int) -> bool:
        """Publish one step record; whether the bus asked to stop."""
        values = {k: v for k, v in record["values"].items() if isinstance(v, float)}
        if mode == "eval":
            if self.eval is None:
                return False
            prefixed = {k[len(EVAL_PREFIX) :]: v for k, v in values.items() if k.startswith(EVAL_PREFIX)}
            self.eval.publish_eval(step, prefixed)
            return self.eval.should_stop()
        if mode == "test":
            if self.test is None:
                return False
            tested = {k[len(TEST_PREFIX) :]: v for k, v in values.items() if k.startswith(TEST_PREFIX)}
            self.test.publish_eval(step, tested)
            return self.test.should_stop()
        if mode == "epoch":
            if self.epoch is None:
                return False
            self.epoch.publish_epoch(step, values)
            return self.epoch.should_stop()
        if record.get("final"):
            self.final = (step, values)  # what the at-end subscribers were given; published at the end
            return False
        self.steps += 1
        plan = self.train.plan(step)
        if plan is None:
            self.train.advance(step)
        else:
            examples, outside = record.get("trained_examples"), record.get("outside_secs")
            self.train.throughput.recorded = (
                examples if isinstance(examples, int) else None,
                float(outside) if isinstance(outside, int | float) else None,
            )  # as the training measured them; the replay's clock is the records'
            self.train.publish_step(plan, step, {k: values[k] for k in plan.keys if k in values})
        return self.train.should_stop()

    def _end(self, step: int) -> None:
        """End the train session at ``step``, with the at-end values the log holds (or the last ones)."""
        self.in_session = False
        final = self.train.final_plan(step)
        if final is not None:
            at, values = self.final or self.train.last_values() or (step, {})
            self.train.publish_final(final, {k: v for k, v in values.items() if k in final.keys}, step=at)
        self.final = None
        self.train.end(step)

    def _stop(self) -> bool:
        if self.in_session:
            self._end(self.bus.step)
        return True


def replay(path: str | os.PathLike[str], bus: EventBus) -> ReplayResult:
    """Drive ``bus`` from a run recorded by ``EventLogSink``, with the same schedules and keys as live.

    Runs one run of ``bus`` (``with bus:``): ``begin``, ``session_created``, a worker's start
    gate (``waiting_for_step``, as recorded), the train steps the
    log holds (planned against each subscriber's schedule and keys, as live), evaluations,
    epoch events, the machine's samples (on the ``system`` signal, at their recorded steps and
    times), the at-end values and ``end`` — until the log ends or a subscriber asks to
    stop (then the run ends there, as live training would). The bus's clocks read the recorded
    times meanwhile (restored afterwards). Checkpoints, stops, errors and exceptions recorded in
    the log are not replayed: the bus's own subscribers decide anew. A sink that needs a model
    (``CheckpointSink``) cannot be replayed.

    Args:
        path: The log (``EventLogSink``'s file).
        bus: Any bus with its sinks and functions attached, not running.

    Returns:
        A :class:`ReplayResult`: steps replayed, the last step, and where the bus stopped.
    """
    # Two passes over the file, one record at a time: the keys the log holds (the lines that can
    # declare one: a step line like one read before is not decoded again), then the replay.
    replayer = _Replayer(bus, iter_event_log_shapes(path))
    records = iter_event_log(path)
    first = next(records, None)
    with _recorded_time(replayer.train) as clock:
        clock.now = float(first.get("wall_time") or 0.0) if first is not None else 0.0
        with bus:
            stopped = replayer.run(clock, itertools.chain([first] if first is not None else [], records))
    return ReplayResult(
        steps=replayer.steps,
        last_step=bus.step,
        stopped=stopped,
        stop_step=bus.step if stopped else None,
        stop_reason=bus.stop_reason if stopped else None,
    )


class FollowedReplay:
    """A replay publisher in follow mode: records are published as they are handed to it.

    Made from the records known so far (they declare the keys); :meth:`feed` publishes each new
    one on ``bus``, inside a run opened by :meth:`start`, with the bus's clocks reading the
    recorded times; :meth:`knows` says whether a record's keys were declared (if not, make a new
    one from all the records). :meth:`close` ends an open session and the run.

    Args:
        bus: The bus (its sinks attached), not running.
        records: The records so far (decoded, as :func:`hookbus.read_event_log` gives them).
        clock: The recorded clock to use (the one :attr:`clock` returns); default a new one.
    """

    def __init__(self, bus: EventBus, records: list[dict[str, Any]], clock: _RecordedClock | None = None) -> None:
        self._replayer = _Replayer(bus, records)
        self.clock = clock or _RecordedClock()
        self._stack = ExitStack()

    def start(self) -> None:
        """Open the bus's run, its clocks on the recorded time."""
        bus = self._replayer.bus  # the publisher's, as a live publisher's core holds it
        self._stack.enter_context(_recorded_time(self._replayer.train, self.clock))
        self._stack.enter_context(bus)

    def knows(self, record: dict[str, Any]) -> bool:
        """Whether the keys declared at construction cover ``record``'s values."""
        return self._replayer.knows(record)

    def feed(self, record: dict[str, Any]) -> None:
        """Publish one record as the live publisher published it."""
        self._replayer.feed(record, self.clock)

    def close(self) -> None:
        """End an open session at the step reached, and the run (its sinks close); idempotent."""
        try:
            self._replayer.cut_short()
        finally:
            self._stack.close()


def recorded_run_key(records: list[dict[str, Any]]) -> str:
    """The identity of the run a log recorded, for a tracker's run key (``hookbus replay --mlflow``).

    A digest of the log's first record (its first ``begin``, with its wall time): the same for
    every upload of the same log, also once the log has grown or a resume cut it back (the first
    record stays), and new for a run that started afresh in a new log.
    """
    first = json.dumps(records[0] if records else {}, sort_keys=True)
    return "replay/" + hashlib.sha256(first.encode()).hexdigest()[:32]
