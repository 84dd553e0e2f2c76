"""TensorBoardSink(train_run=, rate_tag=) and NanGuardSink(error=): what ``hookbus.from_hooks`` builds
for TensorFlow's SummarySaverHook, StepCounterHook and NanTensorHook, driven by a scripted publisher.

The same sinks beside TensorFlow's own hooks are compared in ``tests/_convert/test_from_hooks.py``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hookbus import EventBus
from hookbus.sinks import NanGuardSink, TensorBoardSink
from hookbus.testing import FakeClock, ScriptedPublisher


def _train(sink: TensorBoardSink, steps: int) -> None:
    bus = EventBus(clock=FakeClock(tick=0.5))
    bus.attach(sink)
    publisher = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        publisher.run({"loss": float(s)} for s in range(1, steps + 1))


def _scalars(directory: Path) -> dict[str, list[int]]:
    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return {tag: [e.step for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_train_run_empty_writes_into_the_logdir_itself(tmp_path: Path) -> None:
    _train(TensorBoardSink(tmp_path, every_n_steps=2, train_run=""), 4)
    # The time outside the steps beside the rate, from the second firing (none is measured before the first).
    assert _scalars(tmp_path) == {"loss": [2, 4], "steps/sec": [2, 4], "outside_secs/step": [4]}
    assert not (tmp_path / "train").exists()


def test_rate_tag_renames_or_drops_the_rate(tmp_path: Path) -> None:
    _train(TensorBoardSink(tmp_path / "named", every_n_steps=2, rate_tag="global_step/sec", throughput=False), 4)
    assert _scalars(tmp_path / "named" / "train") == {"loss": [2, 4], "global_step/sec": [2, 4]}
    _train(TensorBoardSink(tmp_path / "none", every_n_steps=2, rate_tag=None), 4)
    assert _scalars(tmp_path / "none" / "train") == {"loss": [2, 4]}


def test_counted_from_its_last_firing_the_first_firing_writes_no_rate(tmp_path: Path) -> None:
    """StepCounterHook's first firing only starts its clock: a rate from the second on."""
    sink = TensorBoardSink(tmp_path, every_n_steps=5, train_run="", rate_tag="global_step/sec", throughput=False)
    sink.schedule = dataclasses.replace(sink.schedule, steps_from_last_firing=True)
    _train(sink, 12)
    assert _scalars(tmp_path) == {"loss": [1, 6, 11], "global_step/sec": [6, 11]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"train_run": "/abs"}, "train_run must be a directory under logdir"),
        ({"train_run": "../up"}, "train_run must be a directory under logdir"),
        ({"rate_tag": ""}, "rate_tag must be a non-empty tag or None"),
        ({"throughput": 1}, "throughput must be True or False"),
    ],
)
def test_bad_runs_and_tags_fail_at_construction(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TensorBoardSink(tmp_path, **kwargs)  # type: ignore[arg-type]


class DivergedError(RuntimeError):
    def __str__(self) -> str:
        return "NaN loss during training."


def test_nan_guard_raises_the_error_it_is_given() -> None:
    bus = EventBus(clock=FakeClock())
    bus.attach(NanGuardSink("loss", error=DivergedError))
    publisher = ScriptedPublisher(bus, keys=["loss"])
    with pytest.raises(DivergedError, match="^NaN loss during training.$"), bus:
        publisher.run({"loss": v} for v in (1.0, float("nan"), 2.0))
    with pytest.raises(ValueError, match="error must be an exception class"):
        NanGuardSink("loss", error=ValueError("not a class"))  # type: ignore[arg-type]
