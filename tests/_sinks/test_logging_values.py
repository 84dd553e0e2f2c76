"""LoggingSink: the values as logging records, in LoggingTensorHook's lines (without TensorFlow).

The same lines next to TensorFlow's own hook are compared in ``tests/_convert/test_from_hooks.py``.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from hookbus import EventBus
from hookbus.sinks import LoggingSink
from hookbus.testing import FakeClock, ScriptedPublisher


def _lines(caplog: pytest.LogCaptureFixture, sink: LoggingSink, steps: int, clock: FakeClock) -> list[str]:
    bus = EventBus(clock=clock)
    bus.attach(sink)
    publisher = ScriptedPublisher(bus, keys=["loss", "acc"])
    with caplog.at_level(logging.INFO, logger=sink.logger.name), bus:
        publisher.run({"loss": 0.1234567 * s, "acc": float(s)} for s in range(1, steps + 1))
    return [r.getMessage() for r in caplog.records if r.name == sink.logger.name]


def test_lines_in_the_order_given_with_the_seconds_since_the_last(caplog: pytest.LogCaptureFixture) -> None:
    sink = LoggingSink(["loss", "acc"], every_n_steps=2, logger="tensorflow")
    lines = _lines(caplog, sink, 4, FakeClock(tick=0.25))
    assert len(lines) == 2
    assert lines[0] == "loss = 0.2469134, acc = 2.0"
    assert lines[1].startswith("loss = 0.4938268, acc = 4.0 (")
    assert lines[1].endswith(" sec)")


def test_dtypes_show_values_as_the_tensor_held_them(caplog: pytest.LogCaptureFixture) -> None:
    plain = _lines(caplog, LoggingSink("loss", every_n_steps=3), 3, FakeClock())
    caplog.clear()
    typed = _lines(caplog, LoggingSink("loss", every_n_steps=3, dtypes={"loss": "float32"}), 3, FakeClock())
    assert plain == [f"loss = {0.1234567 * 3}"]  # the float64 the bus carries
    assert typed == [f"loss = {np.float32(0.1234567 * 3)!s}"]  # what a float32 tensor prints
    assert typed != plain


def test_a_formatter_replaces_the_line(caplog: pytest.LogCaptureFixture) -> None:
    sink = LoggingSink(["acc"], every_n_steps=5, formatter=lambda values: f"accuracy {values['acc']:.0f}")
    assert _lines(caplog, sink, 10, FakeClock()) == ["accuracy 5", "accuracy 10"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keys": []}, "keys must be a key or a non-empty list of keys"),
        ({"keys": "loss", "formatter": "x"}, "formatter must be a function"),
        ({"keys": "loss", "dtypes": {"loss": "float77"}}, "dtypes must map keys to numpy dtype names"),
        ({"keys": "loss", "level": "INFO"}, "level must be a logging level"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoggingSink(**kwargs)  # type: ignore[arg-type]
