"""NanGuardSink: raise or stop on NaN/inf, before the checkpoint, without hiding the step."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from hookbus import EventBus
from hookbus.sinks import NanGuardSink, NonFiniteError
from hookbus.sinks._finite import find_nonfinite
from hookbus.testing import ScriptedPublisher


def values(step: int) -> dict[str, Any]:
    return {"loss": math.nan if step == 3 else 1.0 / step, "other": 1.0}


def test_raises_naming_key_value_and_step_after_every_subscriber_got_the_step() -> None:
    bus = EventBus()
    guard = bus.attach(NanGuardSink())
    seen: list[tuple[int, float]] = []
    bus.on("after_run", lambda e: seen.append((e.step, e.values["loss"])), keys="loss")
    publisher = ScriptedPublisher(bus, keys=["loss", "other"])
    with pytest.raises(NonFiniteError, match=r"loss is non-finite \(nan\) at step 3"), bus:
        publisher.run(values for _ in range(10))
    assert [s for s, _ in seen] == [1, 2, 3]
    assert math.isnan(seen[-1][1])
    assert guard.nonfinite_step == 3


def test_stop_mode_requests_a_stop() -> None:
    bus = EventBus()
    bus.attach(NanGuardSink(keys=["loss"], on_nan="stop"))
    publisher = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        last = publisher.run(values for _ in range(10))
    assert last == 3
    assert bus.stop_reason == "loss is non-finite (nan) at step 3"


def test_checks_only_its_keys_on_its_schedule() -> None:
    bus = EventBus()
    bus.attach(NanGuardSink(keys="loss", every_n_steps=2))
    publisher = ScriptedPublisher(bus, keys=["loss", "other"])
    with bus:
        publisher.run({"loss": 1.0 if s != 3 else math.inf, "other": math.nan} for s in range(1, 6))
    assert publisher.fetched == [(2, ("loss",)), (4, ("loss",))]  # step 3 not due: not seen
    assert bus.stop_reason is None


def test_finds_nonfinite_in_arrays() -> None:
    assert find_nonfinite({"w": np.array([1.0, np.inf])}, ["w"]) is not None
    assert find_nonfinite({"w": np.array([1, 2]), "b": b"x"}, ["w", "b"]) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_nan": "warn"}, r"on_nan must be 'raise' or 'stop' \(got 'warn'\)"),
        ({"every_n_steps": 0}, r"every_n_steps must be a positive int \(got 0\)"),
        ({"keys": None}, r"keys must be a key or a list of keys"),
    ],
)
def test_bad_settings_fail_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NanGuardSink(**kwargs)
