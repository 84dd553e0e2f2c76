"""Per-replica values and values no sink can use: never dropped in silence.

A real ``MirroredStrategy`` on two logical CPUs runs in a child process (``_replicas_child.py``:
logical devices must be set before TensorFlow starts); the rest runs here.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hookbus
from hookbus.sinks import CSVSink, NanGuardSink

CHILD = Path(__file__).with_name("_replicas_child.py")


def _number(value: Any) -> float:
    return float(value)  # the child spells NaN "nan" (JSON has none)


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The child's report: one TensorFlow start for every scenario."""
    out = tmp_path_factory.mktemp("mirrored")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, str(CHILD), str(out)], capture_output=True, text=True, env=env, timeout=180)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0, f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    assert lines, f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(lines[-1][len("REPORT ") :])
    assert report["replicas"] == 2
    assert report["kinds"] == ["PerReplica"]  # what strategy.run returned: one value per replica
    return report


@pytest.mark.subprocess
@pytest.mark.timeout(200)
def test_a_nan_on_one_replica_stops_the_run_at_that_step(mirrored: dict[str, Any]) -> None:
    at_4 = mirrored["reduced"][3]
    assert at_4["step"] == 4
    assert math.isfinite(_number(at_4["parts"][0]))
    assert math.isnan(_number(at_4["parts"][1]))  # replica 1 alone
    assert mirrored.get("nan_error") == [
        "NonFiniteError",
        "loss is non-finite (nan) at step 4; no checkpoint was saved from this step",
    ]
    assert [p["step"] for p in mirrored["published"]] == [1, 2, 3, 4]


@pytest.mark.subprocess
@pytest.mark.timeout(200)
def test_csv_rows_hold_the_mean_across_replicas(mirrored: dict[str, Any]) -> None:
    rows = list(csv.DictReader(io.StringIO(mirrored["csv"])))
    assert [int(r["step"]) for r in rows][:3] == [1, 2, 3]
    for row, reduced in zip(rows[:3], mirrored["reduced"], strict=False):
        parts = [_number(p) for p in reduced["parts"]]
        assert float(row["loss"]) == pytest.approx(sum(parts) / 2, rel=1e-6)  # the mean, not one replica
        assert float(row["examples"]) == 4.0  # an int per replica (half of a batch of 8): averaged as a float


@pytest.mark.subprocess
@pytest.mark.timeout(200)
def test_the_published_mean_equals_strategy_reduce_mean(mirrored: dict[str, Any]) -> None:
    """Differential: every published value is what ``strategy.reduce(MEAN, value, axis=None)`` gives."""
    published = {p["step"]: p for p in mirrored["published"]}
    assert len(mirrored["reduced"]) == 4  # the NaN guard stopped the run at step 4
    for reduced in mirrored["reduced"]:
        ours = published[reduced["step"]]
        for key in ("loss", "examples"):
            if reduced[key] == "nan":
                assert ours[key] == "nan"
            else:
                assert ours[key] == reduced[key]  # exactly: summed and divided in float32, as TensorFlow does


@pytest.mark.subprocess
@pytest.mark.timeout(200)
def test_replicas_values_are_read_on_due_steps_only(mirrored: dict[str, Any]) -> None:
    quiet = mirrored["quiet"]
    due = len(range((quiet["start"] // 3 + 1) * 3, quiet["end"] + 1, 3))  # multiples of 3 crossed
    assert (quiet["start"], quiet["end"], due) == (4, 11, 2)
    assert quiet["reads"] == due


@pytest.mark.subprocess
@pytest.mark.timeout(200)
def test_a_per_replica_evaluation_is_published_as_its_mean(mirrored: dict[str, Any]) -> None:
    evaluation = mirrored["evaluation"]
    assert evaluation["kind"] == "PerReplica"
    assert evaluation["published"] == [{"eval/loss": evaluation["reduced"]}]  # one evaluation, the mean


@pytest.mark.subprocess
@pytest.mark.timeout(200)
def test_per_replica_values_without_a_strategy_fail_naming_strategy_reduce(mirrored: dict[str, Any]) -> None:
    refused = mirrored.get("no_strategy", {"error": "(nothing raised)"})
    assert refused["error"].startswith(
        "value of key 'loss' at step 1 is a PerReplica (one value per replica, from strategy.run)"
    )
    assert "LoopPublisher(strategy=...)" in refused["error"]
    assert "strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)" in refused["error"]
    # Nothing published, and the run fails at the step that ran, as for any value no sink can use
    # (before: at step 0, 'failed at step 0' on the dashboard after step 1 had trained).
    assert refused["bus_step"] == 1


@pytest.mark.subprocess
@pytest.mark.timeout(200)
def test_per_replica_values_under_several_workers_are_refused(mirrored: dict[str, Any]) -> None:
    assert mirrored.get("multi_worker", "(nothing raised)").startswith(
        "TypeError: value of key 'loss' at step 7 is a PerReplica under a multi-worker strategy"
    )
    assert "strategy.reduce(" in mirrored["multi_worker"]


# -- here: values no sink can use ------------------------------------------------------------------


class Opaque:
    pass


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ({"top1": 0.5}, "a dict"),
        ("0.5", "a str"),
        (None, "a NoneType"),
        (Opaque(), f"a {Opaque.__module__}.Opaque"),
        (1 + 2j, "a complex"),
        (np.array([1 + 1j, 2]), "an array of dtype complex128"),
        (np.array(["a", "b"]), "an array of dtype <U1"),
        (np.array([b"a", None], dtype=object), "an array of dtype object"),
    ],
    ids=["dict", "str", "None", "object", "complex", "complex array", "str array", "object array"],
)
def test_a_value_no_sink_can_use_fails_at_its_first_step_naming_key_and_type(
    tmp_path: Path, value: Any, kind: str
) -> None:
    bus = hookbus.EventBus()
    bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=1))
    bus.attach(NanGuardSink("loss"))
    loop = hookbus.LoopPublisher(bus, keys=["loss", "extra"])
    steps: list[int] = []
    bus.on("after_run", lambda event: steps.append(event.step))
    message = "^" + re.escape(
        f"value of key 'extra' at step 3 is {kind}, which no sink can use; publish numbers, arrays of real "
        "numbers or bytes (serialized Summary protos)"
    )

    def train() -> None:
        with bus, loop:
            for step in (1, 2, 3):
                loop.step({"loss": 1.0, "extra": value if step == 3 else 0.5})

    with pytest.raises(TypeError, match=message):
        train()
    assert steps == [1, 2]  # steps 1 and 2 published; step 3 is not half-published


def test_an_eval_value_no_sink_can_use_fails_naming_its_eval_key() -> None:
    bus = hookbus.EventBus()
    bus.on("after_run", lambda event: None)
    loop = hookbus.LoopPublisher(bus, keys=["loss"], eval_keys=["report"])

    def train() -> None:
        with bus, loop:
            loop.step({"loss": 1.0})
            loop.evaluate({"report": {"f1": 0.5}})

    with pytest.raises(TypeError, match=r"^value of key 'eval/report' at step 1 is a dict"):
        train()


@pytest.mark.parametrize(
    "value",
    [1, True, np.float32(0.5), np.array(2.0), np.zeros((2, 2)), np.array([True, False]), b"\x0a\x00"],
    ids=["int", "bool", "float32", "0-d", "array", "bool array", "bytes"],
)
def test_values_sinks_can_use_pass(value: Any) -> None:
    bus = hookbus.EventBus()
    got: list[Any] = []
    bus.on("after_run", lambda event: got.append(event.values["x"]))
    loop = hookbus.LoopPublisher(bus, keys=["x"])
    with bus, loop:
        loop.step({"x": value})
    assert len(got) == 1


def test_a_string_tensor_of_several_values_fails_at_its_first_step() -> None:
    tf = pytest.importorskip("tensorflow")
    bus = hookbus.EventBus()
    bus.on("after_run", lambda event: None)
    loop = hookbus.LoopPublisher(bus, keys=["tags"])
    with pytest.raises(TypeError, match=r"^value of key 'tags' at step 1 is an array of dtype object"), bus, loop:
        loop.step({"tags": tf.constant(["a", "b"])})


# -- the mean itself -------------------------------------------------------------------------------


def test_the_mean_is_summed_in_the_values_dtype_then_divided() -> None:
    from hookbus._tf.loop._replicas import replica_mean

    parts = [np.float32(0.1), np.float32(0.7), np.float32(0.3)]
    mean = replica_mean("loss", parts)
    assert mean.dtype == np.float32
    assert mean == (parts[0] + parts[1] + parts[2]) / np.float32(3)
    assert math.isnan(float(replica_mean("loss", [np.float32(1.0), np.float32(math.nan)])))
    assert replica_mean("n", [np.int32(3), np.int32(4)]) == 3.5  # integers: a float mean
    np.testing.assert_array_equal(replica_mean("w", [np.ones(2, "float32"), np.zeros(2, "float32")]), [0.5, 0.5])


def test_a_mean_needs_one_shape_and_a_numeric_dtype() -> None:
    from hookbus._tf.loop._replicas import replica_mean

    shapes = r"per-replica value of key 'w' has a different shape on each replica \[\(2,\), \(3,\)\]"
    with pytest.raises(ValueError, match=shapes):
        replica_mean("w", [np.zeros(2), np.zeros(3)])
    with pytest.raises(TypeError, match=r"per-replica value of key 'tag' has dtype <U1 .* which has no mean"):
        replica_mean("tag", [np.array("a"), np.array("b")])
