"""CSVSink: rows, header, resume, torn lines, non-finite values, SIGKILL + resume exactly once."""

from __future__ import annotations

import csv
import importlib
import io
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hookbus
from hookbus.sinks import CSVSink
from hookbus.testing import FakeClock, ScriptedPublisher


def read(path: Path) -> list[dict[str, str]]:
    text = path.read_text()
    assert text.endswith("\n")
    return list(csv.DictReader(text.splitlines()))


def header(path: Path) -> list[str]:
    return path.read_text().splitlines()[0].split(",")


def make(path: Path, published: list[str], every: int = 1, **kwargs: Any) -> tuple[hookbus.EventBus, CSVSink, Any]:
    bus = hookbus.EventBus(clock=FakeClock(), wall_clock=FakeClock(1000.0, 1.0))
    sink = bus.attach(CSVSink(path, every_n_steps=every, **kwargs))
    return bus, sink, ScriptedPublisher(bus, published)


def test_rows_every_n_steps_with_header_from_the_publishers_keys(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "metrics.csv"
    bus, _, pub = make(path, ["loss", "acc"], every=10)
    evaluate = ScriptedPublisher(bus, ["loss"], mode="eval")
    with bus:
        pub.begin()
        evaluate.begin()
        pub.session(0)
        for step in range(1, 31):
            pub.advance({"loss": 1 / step, "acc": step / 100})
            if step % 15 == 0:
                evaluate.evaluate({"loss": step * 2.0}, step=step)
        pub.end()
    assert header(path) == ["step", "wall_time", "acc", "loss"]
    rows = read(path)
    assert [int(r["step"]) for r in rows] == [10, 20, 30]
    assert [float(r["loss"]) for r in rows] == [1 / 10, 1 / 20, 1 / 30]
    assert all(float(r["wall_time"]) >= 1000.0 for r in rows)
    eval_path = tmp_path / "sub" / "metrics.eval.csv"
    assert header(eval_path) == ["step", "wall_time", "loss"]
    assert [(r["step"], r["loss"]) for r in read(eval_path)] == [("15", "30.0"), ("30", "60.0")]


def test_nan_and_inf_are_readable_by_pandas_and_csv(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    bus, _, pub = make(path, ["a"])
    with bus:
        pub.run([{"a": math.nan}, {"a": math.inf}, {"a": -math.inf}, {"a": 0.1}])
    assert [r["a"] for r in read(path)] == ["nan", "inf", "-inf", "0.1"]
    frame = pd.read_csv(path)
    assert math.isnan(frame["a"][0])
    assert frame["a"][1] == math.inf
    assert frame["a"][2] == -math.inf
    assert frame["a"][3] == 0.1


def test_arrays_and_bytes_are_not_written_and_keys_filter(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "m.csv"
    bus, _, pub = make(path, ["loss", "w", "s"], keys=["loss", "w"])
    with bus:
        pub.run([{"loss": 1.0, "w": np.zeros(3), "s": b"x"}])
    assert header(path) == ["step", "wall_time", "loss", "w"]
    assert read(path)[0]["w"] == ""


def test_a_key_appearing_later_widens_the_header_atomically(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    bus = hookbus.EventBus(clock=FakeClock())
    sink = bus.attach(CSVSink(path, every_n_steps=1))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        pub.advance({"loss": 1.0})
        pub.advance({"loss": 2.0})
        # A publisher made after begin (not the recommended way) brings a new key mid-run.
        late = ScriptedPublisher(bus, ["acc"], mode="train")
        late.core.session_created(2)
        late.publish("after_run", late.event("after_run", step=3, values={"loss": 3.0, "acc": 0.5}))
        sink.flush()
        pub.end()
    assert path.read_text().count("step") == 1  # never a second header
    rows = read(path)
    assert header(path) == ["step", "wall_time", "loss", "acc"]
    assert [(r["step"], r["loss"], r["acc"]) for r in rows] == [("1", "1.0", ""), ("2", "2.0", ""), ("3", "3.0", "0.5")]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left


def test_resume_in_process_drops_later_rows(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    bus, _, pub = make(path, ["x"])
    evaluate = ScriptedPublisher(bus, ["x"], mode="eval")
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(10):
            pub.advance(lambda s: {"x": float(s)})
        evaluate.evaluate({"x": 1.0}, step=5)
        evaluate.evaluate({"x": 2.0}, step=10)
        pub.session(6)  # re-created after a recoverable error, rewound to 6
        for _ in range(4):
            pub.advance(lambda s: {"x": s + 0.5})
        pub.end()
    assert [(r["step"], r["x"]) for r in read(path)] == [(str(s), f"{s}.0") for s in range(1, 7)] + [
        (str(s), f"{s}.5") for s in range(7, 11)
    ]
    assert [r["step"] for r in read(tmp_path / "m.eval.csv")] == ["5"]


def test_a_step_that_goes_back_in_a_session_is_a_resume_point_and_the_schedule_replans(tmp_path: Path) -> None:
    # A parameter-server worker whose chief restored an older checkpoint reads a step below its last
    # (issue 37): rows after it are the restored timeline's, and an every-10 schedule counts from it
    # (it waited for its old high, so the file got no row for the rest of that run).
    path = tmp_path / "m.csv"
    bus, _, pub = make(path, ["x"], every=10)
    signals: list[tuple[str, int, bool, bool]] = []
    bus.on("after_create_session", lambda e: signals.append(("created", e.step, e.restored, e.rewound)))
    bus.on("session_created", lambda e: signals.append(("session", e.step, e.restored, e.rewound)))
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(95):
            pub.advance(lambda s: {"x": float(s)})
        pub.core.rewound(33)
        pub.step = 33
        for _ in range(40):
            pub.advance(lambda s: {"x": s + 0.5})
        pub.end()
    assert [(r["step"], r["x"]) for r in read(path)] == [(str(s), f"{s}.0") for s in (10, 20, 30)] + [
        (str(s), f"{s}.5") for s in (40, 50, 60, 70)
    ]
    assert signals == [("created", 0, False, False), ("session", 0, False, False), ("session", 33, True, True)]


def test_resume_after_restart_drops_later_rows_and_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("step,wall_time,x\n1,1.0,1.0\n2,2.0,2.0\n3,3.0,3.0\n4,4.0,4")  # killed mid-row
    bus, _, pub = make(path, ["x", "y"])
    with bus:
        pub.begin()
        pub.session(2, restored=True)
        pub.advance({"x": 30.0, "y": 1.0})
        pub.end()
    assert header(path) == ["step", "wall_time", "x", "y"]
    assert [(r["step"], r["x"], r["y"]) for r in read(path)] == [
        ("1", "1.0", ""),
        ("2", "2.0", ""),
        ("3", "30.0", "1.0"),
    ]


def test_torn_last_line_is_dropped_even_with_nothing_to_rewind(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("step,wall_time,x\n1,1.0,1.0\n2,2.0,")
    bus, _, pub = make(path, ["x"])
    with bus:
        pub.begin()
        pub.session(5, restored=True)
        pub.advance({"x": 6.0})
        pub.end()
    assert [r["step"] for r in read(path)] == ["1", "6"]


def test_repeated_step_is_written_once(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    bus, _, pub = make(path, ["x"])
    evaluate = ScriptedPublisher(bus, ["x"], mode="eval")
    with bus:
        pub.begin()
        pub.session(0)
        pub.advance({"x": 1.0})
        evaluate.evaluate({"x": 1.0}, step=1)
        evaluate.evaluate({"x": 2.0}, step=1)
        pub.end()
    assert [r["x"] for r in read(tmp_path / "m.eval.csv")] == ["1.0"]


def test_no_eval_file_without_eval_values(tmp_path: Path) -> None:
    bus, _, pub = make(tmp_path / "m.csv", ["x"])
    with bus:
        pub.run([{"x": 1.0}])
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.csv.lock", "m.csv"]  # the lock of the train file only


def test_flush_is_the_checkpoint_barrier(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    bus, sink, pub = make(path, ["x"], flush_secs=3600)
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(5):
            pub.advance({"x": 1.0})
        sink.flush()
        assert [r["step"] for r in read(path)] == ["1", "2", "3", "4", "5"]
        pub.end()


def test_foreign_file_fails_at_begin(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("a,b\n1,2\n")
    bus = hookbus.EventBus()
    bus.attach(CSVSink(path, on_error="raise"))
    pub = ScriptedPublisher(bus, ["x"])
    with pytest.raises(ValueError, match="is not a CSVSink file"), bus:
        pub.begin()
    assert path.read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every_n_steps": 0}, r"every_n_steps must be a positive int \(got 0\)"),
        ({"flush_secs": 0}, r"flush_secs must be a positive finite number of seconds \(got 0\)"),
        ({"max_queue_size": 0}, r"max_queue_size must be a positive int \(got 0\)"),
        ({"close_deadline": -1}, r"close_deadline must be a positive finite number of seconds \(got -1\)"),
        ({"keys": ""}, "keys must be non-empty strings"),
    ],
)
def test_invalid_arguments_fail_at_construction(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CSVSink(tmp_path / "m.csv", **kwargs)


def test_invalid_paths_fail_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="path must be a file, not a directory"):
        CSVSink(tmp_path)
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="is not a directory"):
        CSVSink(tmp_path / "f" / "m.csv")
    with pytest.raises(ValueError, match="path must be a non-empty str or os.PathLike"):
        CSVSink(None)  # type: ignore[arg-type]


# -- resume as a property ------------------------------------------------------------------

Process = list[tuple[int, int]]  # sessions: (steps to rewind by, steps to run)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    processes=st.lists(
        st.lists(st.tuples(st.integers(0, 12), st.integers(0, 15)), min_size=1, max_size=3), min_size=1, max_size=4
    ),
    every=st.sampled_from([1, 3]),
)
def test_resume_property_each_step_exactly_once(processes: list[Process], every: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.csv"
        expected: dict[int, float] = {}
        step = 0
        for gen, sessions in enumerate(processes):
            bus, _, pub = make(path, ["x"], every=every)
            with bus:
                pub.begin()
                for back, run in sessions:
                    step = max(0, step - back)
                    expected = {s: v for s, v in expected.items() if s <= step}
                    pub.session(step, restored=step > 0)
                    for _ in range(run):
                        step += 1
                        pub.advance(lambda s, g=gen: {"x": s + g / 8})
                        if step % every == 0:
                            expected[step] = step + gen / 8
                pub.end()
        rows = read(path) if path.exists() else []
        assert [int(r["step"]) for r in rows] == sorted(expected)
        assert [float(r["x"]) for r in rows] == [expected[s] for s in sorted(expected)]


# -- SIGKILL at a random moment, then resume at the last flushed step ----------------------

CHILD = textwrap.dedent(
    """
    import os, sys, time
    sys.modules["tensorflow"] = None  # the CSV path needs no TensorFlow; start fast
    import hookbus
    from hookbus.sinks import CSVSink
    from hookbus.testing import ScriptedPublisher

    path, side, start, stop, gen = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    bus = hookbus.EventBus()
    sink = bus.attach(CSVSink(path, every_n_steps=1, flush_secs=0.01))
    pub = ScriptedPublisher(bus, ["x", "y"])
    with bus:
        pub.begin()
        pub.session(start)
        for step in range(start + 1, stop + 1):
            pub.advance({"x": step + gen / 4, "y": float("nan") if step % 11 == 0 else -step})
            if step % 100 == 0:  # the checkpoint barrier: flush, then record the checkpoint
                sink.flush()
                with open(side + ".tmp", "w") as f:
                    f.write(str(step))
                os.replace(side + ".tmp", side)
            time.sleep(0.0005)
        pub.end()
    """
)
STOP = 1500


def _child(tmp_path: Path, start: int, gen: int) -> subprocess.Popen[bytes]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    args = [
        sys.executable,
        str(script),
        str(tmp_path / "m.csv"),
        str(tmp_path / "side"),
        str(start),
        str(STOP),
        str(gen),
    ]
    return subprocess.Popen(args, stderr=subprocess.PIPE)


def _sigkill_trial(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    side = tmp_path / "side"
    starts = [0]
    for gen in range(2):  # two kills, then a run to the end
        target = rng.randrange(starts[-1] + 100, STOP - 300)
        proc = _child(tmp_path, starts[-1], gen)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if side.exists() and int(side.read_text()) >= target:
                break
            time.sleep(0.002)
        time.sleep(rng.random() * 0.08)  # land anywhere between two checkpoints
        if proc.poll() is not None:
            pytest.fail(f"the child ended before it was killed: {proc.communicate()[1].decode()}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        starts.append(int(side.read_text()))
    proc = _child(tmp_path, starts[-1], 2)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    lines = (tmp_path / "m.csv").read_text().splitlines()
    assert lines[0] == "step,wall_time,x,y"
    rows = list(csv.reader(lines[1:]))  # every line parses
    assert [int(r[0]) for r in rows] == list(range(1, STOP + 1))
    # Each step holds the value of the last process that wrote it: the surviving timeline.
    gens = [sum(int(r[0]) > s for s in starts) - 1 for r in rows]
    assert [float(r[2]) for r in rows] == [int(r[0]) + g / 4 for r, g in zip(rows, gens, strict=True)]
    assert all(len(r) == 4 for r in rows)
    assert len(pd.read_csv(tmp_path / "m.csv")) == STOP


@pytest.mark.subprocess
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkill_then_resume_leaves_every_step_exactly_once(tmp_path: Path, seed: int) -> None:
    _sigkill_trial(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("seed", range(3, 33))
def test_sigkill_many_trials(tmp_path: Path, seed: int) -> None:
    _sigkill_trial(tmp_path, seed)


def test_the_row_is_made_on_the_writer_thread_from_the_events_values(tmp_path: Path) -> None:
    # Issue 30, CSV per row: the training thread hands the writer the event's read-only values;
    # the writer thread picks the scalars and converts them (was: a dict of float() per row on
    # the training thread).
    import threading

    converted_on: list[str] = []

    class Recorded(float):
        def __float__(self) -> float:
            converted_on.append(threading.current_thread().name)
            return float.__float__(self)

    path = tmp_path / "m.csv"
    bus, sink, pub = make(path, ["a", "b"])
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 4):
            pub.advance({"a": Recorded(step / 4), "b": Recorded(-step)})
        sink.flush()
        pub.end()
    assert converted_on
    assert all(name.startswith("hookbus-writer") for name in converted_on), converted_on
    assert [(r["a"], r["b"]) for r in read(path)] == [("0.25", "-1.0"), ("0.5", "-2.0"), ("0.75", "-3.0")]


def test_train_and_eval_rows_queued_together_each_reach_their_file_in_order(tmp_path: Path) -> None:
    # One batch of the writer thread holding rows of both files: each file gets its own, in order.
    import threading

    path = tmp_path / "m.csv"
    bus, sink, pub = make(path, ["loss"])
    evaluate = ScriptedPublisher(bus, ["loss"], mode="eval")
    gate = threading.Event()

    def hold() -> None:
        gate.wait()

    with bus:
        pub.begin()
        evaluate.begin()
        pub.session(0)
        sink.output.call(hold)  # the writer thread waits here while the rows queue up
        for step in range(1, 7):
            pub.advance({"loss": step / 8})
            if step % 2 == 0:
                evaluate.evaluate({"loss": step * 2.0}, step=step)
        gate.set()
        sink.flush()
        pub.end()
    assert [(r["step"], r["loss"]) for r in read(path)] == [(str(s), repr(s / 8)) for s in range(1, 7)]
    evals = read(tmp_path / "m.eval.csv")
    assert [(r["step"], r["loss"]) for r in evals] == [(str(s), repr(s * 2.0)) for s in (2, 4, 6)]


def test_rows_queued_together_are_one_file_check_and_one_write_of_what_csv_writer_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 30, CSV per row: the writer thread takes the rows it finds queued as one batch,
    # checks once that the path still names its file and writes them in one call; the text is
    # what csv.writer writes for the same cells.
    import threading

    csv_module = importlib.import_module("hookbus.sinks._csv_file")
    checks: list[int] = []
    moved = csv_module.CSVFile._moved

    def counted(self: Any) -> bool:
        checks.append(1)
        return bool(moved(self))

    monkeypatch.setattr(csv_module.CSVFile, "_moved", counted)
    path = tmp_path / "m.csv"
    bus, sink, pub = make(path, ["a", "b"])
    cells = [math.nan, math.inf, -math.inf, 0.1, 1e-300, -2.5e17, 3.0, 1 / 3]
    gate = threading.Event()

    def hold() -> None:
        gate.wait()

    with bus:
        pub.begin()
        pub.session(0)
        sink.output.call(hold)  # the writer thread waits here while the rows queue up
        for i, value in enumerate(cells):
            pub.advance({"a": value} if i < 3 else {"a": value, "b": -value})
        gate.set()
        sink.flush()
        assert len(checks) == 1
        pub.end()
    text = path.read_text()
    expected = io.StringIO()
    writer = csv.writer(expected, lineterminator="\n")
    writer.writerow(["step", "wall_time", "a", "b"])
    for row in csv.reader(text.splitlines()[1:]):
        writer.writerow(row)
    assert text == expected.getvalue()
    rows = read(path)
    assert [r["a"] for r in rows] == [repr(v) for v in cells]
    assert [r["b"] for r in rows] == ["", "", ""] + [repr(-v) for v in cells[3:]]


# -- a slow disk -----------------------------------------------------------------------------


def test_slow_disk_blocks_training_only_when_the_queue_is_full(tmp_path: Path) -> None:
    import threading

    csv_module = importlib.import_module("hookbus.sinks._csv_file")

    gate = threading.Event()
    original = csv_module.CSVFile.write_rows
    stalled: list[int] = []  # rows in each stalled write: the writer takes what it finds queued

    def slow_write(self: Any, rows: Any) -> None:
        stalled.append(len(rows))
        gate.wait()
        original(self, rows)

    path = tmp_path / "m.csv"
    bus, sink, pub = make(path, ["x"], max_queue_size=3)
    published = 0

    def train() -> None:
        nonlocal published
        with bus:
            pub.begin()
            pub.session(0)
            for _ in range(10):
                pub.advance({"x": 1.0})
                published += 1
            pub.end()

    csv_module.CSVFile.write_rows = slow_write
    try:
        trainer = threading.Thread(target=train, daemon=True)
        trainer.start()
        end = time.monotonic() + 10
        while published < 4 and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.2)
        # the rows in the stalled write, three queued, and the next step blocks
        assert published == stalled[0] + 3 < 10
        gate.set()
        trainer.join(10)
    finally:
        csv_module.CSVFile.write_rows = original
    assert [r["step"] for r in read(path)] == [str(s) for s in range(1, 11)]


def test_hung_writer_close_warns_with_sink_name_and_count(tmp_path: Path) -> None:
    import threading

    from hookbus._writers._writer import WriterWarning

    csv_module = importlib.import_module("hookbus.sinks._csv_file")

    gate = threading.Event()
    original = csv_module.CSVFile.write_rows

    def hung_write(self: Any, rows: Any) -> None:
        gate.wait()
        original(self, rows)

    bus, sink, pub = make(tmp_path / "m.csv", ["x"], close_deadline=0.2, name="metrics")
    csv_module.CSVFile.write_rows = hung_write
    try:
        pub.begin()
        pub.session(0)
        for _ in range(4):
            pub.advance({"x": 1.0})
        with pytest.warns(WriterWarning, match="metrics: 4 rows could not be written"):
            sink.close()
    finally:
        gate.set()
        csv_module.CSVFile.write_rows = original


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    width=st.integers(1, 5),
    rows=st.lists(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=5, max_size=5), max_size=6),
)
def test_a_row_with_every_column_is_written_as_csv_writer_writes_its_cells(
    tmp_path: Path, width: int, rows: list[list[float]]
) -> None:
    # The usual row (a value in every column, no other) takes the template path of CSVFile; its
    # text is csv.writer's for the cells the general path makes (str of the step, repr of the rest).
    csv_file = importlib.import_module("hookbus.sinks._csv_file").CSVFile
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "m.csv"
    columns = [f"k{i}" for i in range(width)]
    f = csv_file(path, list(columns))
    f.start_session(0)
    f.write_rows([(n, 1000.0 + n / 3, dict(zip(columns, c[:width], strict=True))) for n, c in enumerate(rows, 1)])
    f.close()
    expected = io.StringIO()
    writer = csv.writer(expected, lineterminator="\n")
    writer.writerow(["step", "wall_time", *columns])
    for step, cells in enumerate(rows, 1):
        writer.writerow([str(step), repr(1000.0 + step / 3), *(repr(c) for c in cells[:width])])
    assert path.read_text() == expected.getvalue()


def test_the_usual_rows_path_leaves_repeats_and_new_keys_to_the_general_one(tmp_path: Path) -> None:
    # Issue 30: CSVFile.write_rows writes a batch's usual rows by template; a repeated or earlier
    # step (dropped: one row per step) and a row as wide as the columns that brings a new key in
    # place of one (a new column, the missing cell empty) must still leave that path.
    csv_file = importlib.import_module("hookbus.sinks._csv_file").CSVFile
    path = tmp_path / "m.csv"
    f = csv_file(path, ["a", "b"])
    f.start_session(0)
    f.write_rows(
        [
            (1, 1.0, {"a": 1.0, "b": 2.0}),
            (1, 1.5, {"a": 9.0, "b": 9.0}),  # a repeat of step 1
            (2, 2.0, {"a": 3.0, "b": 4.0}),
            (1, 2.5, {"a": 9.0, "b": 9.0}),  # an earlier step
            (3, 3.0, {"a": 5.0, "c": 6.0}),  # two values, one of them new
            (4, 4.0, {"a": 7.0, "b": 8.0, "c": 9.0}),
            (4, 4.5, {"a": 9.0, "b": 9.0, "c": 9.0}),  # a repeat once the columns changed
        ]
    )
    f.flush()
    assert f.landed == 7  # each row's end offset is where the file ends after it: 4 written, 3 dropped
    f.close()
    assert path.read_text().splitlines() == [
        "step,wall_time,a,b,c",
        "1,1.0,1.0,2.0,",
        "2,2.0,3.0,4.0,",
        "3,3.0,5.0,,6.0",
        "4,4.0,7.0,8.0,9.0",
    ]


def _train(path: Path, keys: list[str], start: int, steps: int, restored: bool | None = None) -> None:
    bus, _, pub = make(path, keys)
    with bus:
        pub.begin()
        pub.session(start, restored=restored)
        for step in range(start + 1, start + steps + 1):
            pub.advance({k: float(step) for k in keys})
        pub.end()


def test_a_fresh_training_with_other_keys_writes_its_own_header(tmp_path: Path) -> None:
    # The same script changed to log other metrics and run again from step 0: the file is this
    # run's, with its columns only (not the last run's header with a column left empty).
    path = tmp_path / "metrics.csv"
    _train(path, ["loss", "acc"], 0, 3)
    _train(path, ["loss", "mae"], 0, 2)
    assert header(path) == ["step", "wall_time", "loss", "mae"]
    assert [(r["step"], r["loss"], r["mae"]) for r in read(path)] == [("1", "1.0", "1.0"), ("2", "2.0", "2.0")]


def test_a_resume_with_other_keys_keeps_the_rows_and_says_which_columns_stay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "metrics.csv"
    _train(path, ["loss", "acc"], 0, 4)
    with caplog.at_level("WARNING", logger="hookbus"):
        _train(path, ["loss", "mae"], 2, 2, restored=True)
    assert header(path) == ["step", "wall_time", "acc", "loss", "mae"]
    rows = read(path)
    assert [(r["step"], r["acc"], r["loss"], r["mae"]) for r in rows] == [
        ("1", "1.0", "1.0", ""),
        ("2", "2.0", "2.0", ""),
        ("3", "", "3.0", "3.0"),
        ("4", "", "4.0", "4.0"),
    ]
    said = [r.getMessage() for r in caplog.records if "does not write" in r.getMessage()]
    assert len(said) == 1, said
    assert "['acc']" in said[0]
    assert "up to step 2" in said[0]
