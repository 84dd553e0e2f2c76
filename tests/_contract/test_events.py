"""Due-step shortcuts keep their contracts: Event's constructor, the scalar conversion (issue 30)."""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

import numpy as np
import pytest

from hookbus._contract._events import Event
from hookbus._rules._values import _SCALARS, publishable, publishable_values, to_value


def _generated_signature() -> inspect.Signature:
    """The signature a plain frozen dataclass of Event's fields would have."""
    specs = [
        (f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory))
        for f in dataclasses.fields(Event)
    ]
    reference = dataclasses.make_dataclass("Reference", specs, frozen=True)
    return inspect.signature(reference)


def test_the_constructor_takes_every_field_in_order_with_the_dataclass_defaults() -> None:
    ours = inspect.signature(Event).parameters
    generated = _generated_signature().parameters
    assert list(ours) == list(generated)
    for name, parameter in generated.items():
        field = next(f for f in dataclasses.fields(Event) if f.name == name)
        expected = field.default_factory() if field.default_factory is not dataclasses.MISSING else parameter.default
        assert ours[name].default == expected, name
        assert ours[name].kind is parameter.kind, name


def test_an_event_is_frozen_compares_by_its_fields_and_replace_keeps_the_rest() -> None:
    def stop(reason: str, step: int) -> None:
        return None

    event = Event(
        "after_run", 7, values={"loss": 0.5}, wall_time=1.0, elapsed=2.0, final=True, local_step=3, _stop=stop
    )
    assert [getattr(event, f.name) for f in dataclasses.fields(Event)] == [
        "after_run",
        7,
        "train",
        {"loss": 0.5},
        1.0,
        2.0,
        False,
        False,
        True,
        None,
        None,
        3,
        None,
        None,
        stop,
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.step = 8  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del event.mode
    twin = Event("after_run", 7, values={"loss": 0.5}, wall_time=1.0, elapsed=2.0, final=True, local_step=3)
    assert twin == event  # _stop is not compared
    assert "_stop" not in repr(event)
    moved = dataclasses.replace(event, step=9)
    assert (moved.step, moved.values, moved.local_step, moved._stop) == (9, {"loss": 0.5}, 3, stop)
    assert Event("begin", 0).values == {}


@pytest.mark.parametrize("kind", sorted(_SCALARS, key=str))
def test_the_exact_type_shortcut_converts_as_to_value_does(kind: type) -> None:
    for raw in (0, 1, 3):
        value = kind(raw)
        converted = publishable("loss", value, 1)
        assert type(converted) is float
        assert converted == to_value(value)


def test_a_steps_values_convert_as_publishable_converts_each_and_fail_on_the_first_it_refuses() -> None:
    # publishable_values is the due step's loop (its fast cases inline): the same value for every
    # kind a publisher hands it, the same type (a float subclass such as numpy's float64 passes as
    # it is), and the same refusal naming the key and the step.
    raw: dict[str, Any] = {kind.__name__: kind(1) for kind in _SCALARS}
    raw |= {
        "float": 0.25,
        "float64": np.float64(0.5),
        "0-d": np.array(2.0, dtype=np.float32),
        "array": np.ones(3),
        "bytes": b"summary",
        "nan": math.nan,
        "uint8": np.uint8(7),
    }
    converted = publishable_values(raw, 4)
    assert list(converted) == list(raw)
    for key, value in raw.items():
        expected = publishable(key, value, 4)
        assert type(converted[key]) is type(expected), key
        if isinstance(expected, np.ndarray):
            assert (converted[key] == expected).all()
        elif key != "nan":
            assert converted[key] == expected, key
    assert math.isnan(converted["nan"])
    with pytest.raises(TypeError, match=r"value of key 'name' at step 4 is a str"):
        publishable_values({"loss": np.float32(1.0), "name": "x"}, 4)


def test_the_port_stamps_a_due_steps_event_by_position_as_it_stamps_every_other() -> None:
    # BusPort.event makes a due step's event (no other field, one machine) by position; every
    # other event through the keywords. Both carry the bus's clocks, the defaults and the stop.
    import hookbus
    from hookbus.testing import FakeClock

    bus = hookbus.EventBus(clock=FakeClock(5.0, 1.0), wall_clock=FakeClock(1000.0, 1.0))
    port = bus._port
    due = port.event("after_run", step=3, mode="eval", values={"a": 1.0}, final=True)
    other = port.event("session_created", step=3, restored=True, rewound=True)
    begin = port.event("begin", step=0)
    assert 1000.0 <= due.wall_time < other.wall_time < begin.wall_time  # read from the bus's wall clock
    values = {"a": 1.0}
    assert due == Event("after_run", 3, "eval", values=values, wall_time=due.wall_time, elapsed=due.elapsed, final=True)
    assert other == Event(
        "session_created", 3, wall_time=other.wall_time, elapsed=other.elapsed, restored=True, rewound=True
    )
    assert begin == Event("begin", 0, wall_time=begin.wall_time, elapsed=begin.elapsed)
    assert (due.task_type, due.task_index, due.local_step) == (None, None, None)
    assert due._stop is not None
    assert due._stop == other._stop == begin._stop  # the bus's own stop, by either path
