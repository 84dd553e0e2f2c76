"""The replay's first pass, ``iter_event_log_shapes``: a step line that differs from one read before
only in its numbers is not decoded again; what it skips never changes what the log declares, and a
bad line still fails where the whole decode fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookbus._contract._event_log import event_log_line, iter_event_log, iter_event_log_shapes
from hookbus._publishing._replay import _keys

KEYS = st.sampled_from(
    ["loss", "accuracy", "eval/loss", "epoch/loss", "epoch/val_loss", "lr", 'a"b', "é", "step", "mode"]
)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**20), 10**20),
    st.sampled_from([0.0, -0.0, 1e-300, 1e300, 5e-324]),
)
STEP = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(["train", "eval", "epoch"]),
        "values": st.dictionaries(KEYS, NUMBERS, max_size=4),
        "final": st.booleans(),
    }
)


def _write(path: Path, steps: list[dict[str, Any]]) -> None:
    lines = [event_log_line("begin", step=0, wall_time=1.0, mode="train", keys=["loss"], shapes={"loss": None})]
    for n, step in enumerate(steps, 1):
        fields: dict[str, Any] = {"step": n, "wall_time": 1.0 + n / 3, "elapsed": n / 7, "mode": step["mode"]}
        if step["final"]:
            fields["final"] = True
        plain = {k: v for k, v in step["values"].items() if k not in ("step", "mode")}
        nested = {k: v for k, v in step["values"].items() if k in ("step", "mode")}  # as the sink nests them
        if nested:
            fields["values"] = nested
        lines.append(event_log_line("step", **fields, **plain))
        if n % 5 == 0:
            lines.append(
                event_log_line("checkpoint_saved", step=n, path=f"ckpt/model.ckpt-{n}", value=None, wall_time=1.0)
            )
    path.write_text("".join(lines), encoding="utf-8")


def _text(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True)  # NaN as NaN: records compare by their text


def _shape(record: dict[str, Any]) -> tuple[Any, ...]:
    return (sorted(record), record["mode"], list(record["values"]), record.get("final"))


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=40))
def test_the_first_pass_declares_what_the_whole_decode_declares(
    tmp_path_factory: pytest.TempPathFactory, steps: Any
) -> None:
    path = tmp_path_factory.mktemp("log") / "events.jsonl"
    _write(path, steps)
    everything = list(iter_event_log(path))
    shapes = list(iter_event_log_shapes(path))
    assert _keys(shapes) == _keys(everything)
    # What it gives is the whole decode's records in order, less step records only, each of which
    # has the fields, mode and value keys of a step record given before it.
    given_ = [_text(r) for r in shapes]
    position = 0
    for record in everything:
        if position < len(given_) and _text(record) == given_[position]:
            position += 1
            continue
        assert record["record"] == "step", record
        assert _shape(record) in [_shape(r) for r in shapes[:position] if r["record"] == "step"], record
    assert position == len(given_)


def test_a_bad_or_newer_line_among_known_step_lines_still_fails(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    _write(path, [{"mode": "train", "values": {"loss": 1.0}, "final": False}] * 3)
    good = path.read_text(encoding="utf-8")
    for bad in (
        '{"v":1,"record":"step","step":4,"wall_time":2.0,"elapsed":0.5,"mode":"train","loss":1.0.0}\n',  # a torn write
        '{"v":2,"record":"step","step":4,"wall_time":2.0,"elapsed":0.5,"mode":"train","loss":1.0}\n',  # a newer format
    ):
        path.write_text(good + bad, encoding="utf-8")
        with pytest.raises(ValueError, match=r"events\.jsonl line 5"):
            list(iter_event_log(path))
        with pytest.raises(ValueError, match=r"events\.jsonl line 5"):
            list(iter_event_log_shapes(path))
    path.write_text(good + '{"v":1,"record":"step","step":4', encoding="utf-8")  # being written: not yet a line
    assert [r["record"] for r in iter_event_log_shapes(path)] == ["begin", "step"]  # steps 2 and 3: step 1's shape
