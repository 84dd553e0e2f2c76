"""The checkpoint barrier alone: a roster of plain sinks and a list for what it announces, no bus."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from hookbus._bus._barrier import Barrier
from hookbus._bus._roster import Roster
from hookbus._bus._subscription import Subscriber
from hookbus._checkpoints._store import FileCheckpointStore
from hookbus._contract._schedule import Schedule
from hookbus.sink_api import Sink


class Writer(Sink):
    def __init__(self, name: str, *, fails: bool = False, state: dict[str, Any] | None = None, **kw: Any) -> None:
        super().__init__(name=name, **kw)
        self.fails = fails
        self.state = state or {}
        self.flushed = 0

    def on_after_run(self, event: Any) -> None:
        pass

    def flush(self) -> None:
        if self.fails:
            raise OSError("No space left on device")
        self.flushed += 1

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)


class Guard(Sink):
    controls_training = True

    def checkpoint_veto(self, step: int) -> str | None:
        return f"step {step} is not finite" if step == 13 else None


def _record(roster: Roster, sink: Sink) -> Subscriber:
    record = Subscriber(
        name=sink.name,
        handlers={},
        schedule=Schedule(every_n_steps=1),
        keys=None,
        priority=sink.priority,
        on_error=sink.on_error,
        order=roster.next_order(),
        sink=sink,
    )
    roster.add(record)
    return record


def _barrier(*sinks: Sink) -> tuple[Barrier, Roster, list[tuple[str, str, int, str]]]:
    roster = Roster()
    for sink in sinks:
        _record(roster, sink)
    announced: list[tuple[str, str, int, str]] = []
    barrier = Barrier(roster, lambda r, signal, step, e: announced.append((r.name, signal, step, str(e))))
    return barrier, roster, announced


def test_prepare_flushes_every_live_sink_and_collects_the_states_by_name() -> None:
    csv, early = Writer("CSVSink"), Writer("EarlyStoppingSink", state={"best": 0.5})
    barrier, _, announced = _barrier(csv, early)
    prepared = barrier.prepare(10)
    assert prepared is not None
    assert (prepared.step, dict(prepared.states)) == (10, {"EarlyStoppingSink": {"best": 0.5}})
    assert (csv.flushed, early.flushed) == (1, 1)
    assert announced == []


def test_a_control_sink_vetoes_the_save(caplog: pytest.LogCaptureFixture) -> None:
    writer = Writer("CSVSink")
    barrier, _, _ = _barrier(Guard(), writer)
    with caplog.at_level(logging.WARNING, logger="hookbus"):
        assert barrier.prepare(13) is None
    assert writer.flushed == 0  # nothing flushed for a checkpoint that is not saved
    assert "no checkpoint of step 13: Guard: step 13 is not finite" in caplog.text
    assert barrier.veto(14) is None


def test_a_writer_that_cannot_flush_is_disabled_announced_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    broken = Writer("TensorBoardSink", fails=True, on_error="isolate", state={"rows": 3})
    barrier, roster, announced = _barrier(broken, Writer("CSVSink", state={"rows": 4}))
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        prepared = barrier.prepare(20)
    assert prepared is not None
    assert dict(prepared.states) == {"CSVSink": {"rows": 4}}
    record = roster.record_of(broken)
    assert record is not None
    assert record.disabled
    assert record.errors == 1
    assert announced == [("TensorBoardSink", "flush", 20, "No space left on device")]
    assert "lost the exactly-once promise" in caplog.text
    barrier.flush(21, "at the end")  # a disabled sink is no longer flushed
    assert len(announced) == 1


def test_a_raise_sink_that_cannot_flush_stops_the_save() -> None:
    barrier, _, announced = _barrier(Writer("Strict", fails=True, on_error="raise"))
    with pytest.raises(OSError, match="No space left"):
        barrier.prepare(5)
    assert announced == []


class NpzBackend:
    """A model saved as one plain file (what a NumPy publisher's backend does)."""

    ready = True

    def save(self, path: str) -> str:
        Path(path + ".npz").write_bytes(b"weights")
        return path

    def restore(self, path: str) -> None:
        pass


def test_commit_saves_the_model_then_the_states_beside_it_and_record_names_it(tmp_path: Path) -> None:
    barrier, _, _ = _barrier(Writer("EarlyStoppingSink", state={"best": 0.25}))
    store = FileCheckpointStore(".npz")
    prepared = barrier.prepare(4)
    assert prepared is not None
    prefix = str(tmp_path / "ckpt" / "model-4")
    assert barrier.commit(prepared, NpzBackend(), store, prefix, 0.25) == prefix
    assert store.read_state(prefix) == {"step": 4, "value": 0.25, "sinks": {"EarlyStoppingSink": {"best": 0.25}}}
    store.set_pointer(str(tmp_path / "ckpt"), [prefix])  # the seam's keep_only: the store's own
    assert store.checkpoints(str(tmp_path / "ckpt")) == [prefix]
