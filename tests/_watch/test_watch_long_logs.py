"""Issue 39 item 1, the watcher on long logs: a first read takes runs of train steps at once, and
``hookbus watch --once``'s memory does not grow with the log's length.

Taking many train steps at once (by columns) must keep exactly what taking them one by one
keeps: the window, each key's extremes (the first of equal ones), the rates' facts, and the
fallbacks (a NaN, a key some records lack, nested values, a worker's local steps, at-end
records, time going backwards, a resume's cut). The memory bound is a property, not a time:
the peak of traced allocations of ``--once`` on a log ten times longer is the same within a
small margin (``tracemalloc``; what the interpreter and the imports hold is not traced twice).
Seconds are ``bench/watch.py``'s.
"""

from __future__ import annotations

import gc
import io
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hookbus._contract._event_log import event_log_line, parsed
from hookbus._watch._command import RENDERING
from hookbus._watch._run import RunLog
from hookbus._watch._watch import Watch

_NAN, _INF = float("nan"), float("inf")


def _train_run(rng: random.Random, step: int, when: float, length: int) -> tuple[list[dict[str, Any]], int, float]:
    """``length`` train steps from ``step`` on, with one oddity chosen by ``rng`` (or none)."""
    oddities = ["none", "none", "nan", "inf", "missing", "int", "nested", "local", "final", "back", "ties"]
    oddity = rng.choice(oddities) if step else "none"  # the first run is plain: one is always taken at once
    at = rng.randrange(length) if length else 0
    records: list[dict[str, Any]] = []
    for index in range(length):
        step += 1
        when += rng.choice([0.001, 0.002, 0.0])
        values: dict[str, Any] = {"loss": rng.choice([1.0, 0.5, 2.0]) * rng.random(), "accuracy": rng.random()}
        if oddity == "ties":
            values = {"loss": rng.choice([0.0, -0.0, 1.0]), "accuracy": rng.choice([0.25, 0.5])}
        record: dict[str, Any] = {"v": 1, "record": "step", "step": step, "wall_time": when, "elapsed": when}
        record["mode"] = "train"
        if index == at:
            if oddity in ("nan", "inf"):
                values["loss"] = _NAN if oddity == "nan" else -_INF
            elif oddity == "missing":
                del values["accuracy"]
            elif oddity == "int":
                values["accuracy"] = 1
            elif oddity == "nested":
                record["values"] = {"step": 0.125}
            elif oddity == "local":
                record["task"], record["local_step"] = "worker:1", index
            elif oddity == "final":
                record["final"] = True
            elif oddity == "back":
                when -= 0.5
                record["wall_time"] = when
        records.append({**record, **values})
    return records, step, when


def _log(seed: int) -> list[dict[str, Any]]:
    """A run's records: runs of train steps (long and short, odd and plain) between the other kinds."""
    rng = random.Random(seed)
    records: list[dict[str, Any]] = [
        {"v": 1, "record": "begin", "step": 0, "wall_time": 0.0, "mode": "train", "keys": ["accuracy", "loss"]},
        {"v": 1, "record": "session_created", "step": 0, "wall_time": 0.0, "mode": "train", "restored": False},
    ]
    step, when = 0, 0.0
    for number in range(12):
        length = 300 if number == 0 else rng.choice([0, 5, 63, 64, 100, 300, 700])
        run, step, when = _train_run(rng, step, when, length)
        records += run
        kind = rng.choice(["checkpoint", "eval", "cut", "stop", "status"])
        if kind == "checkpoint":
            records.append({"v": 1, "record": "checkpoint_saved", "step": step, "path": f"ckpt-{step}", "value": None})
        elif kind == "eval":
            records.append(
                {"v": 1, "record": "step", "step": step, "wall_time": when, "mode": "eval", "eval/loss": 0.5}
            )
        elif kind == "cut":  # a resume behind the steps recorded
            step = max(0, step - rng.randrange(1, 200))
            records.append(
                {
                    "v": 1,
                    "record": "session_created",
                    "step": step,
                    "wall_time": when,
                    "mode": "train",
                    "restored": True,
                }
            )
        elif kind == "stop":
            records.append({"v": 1, "record": "stop_requested", "step": step, "wall_time": when, "reason": "r"})
        else:
            records.append({"v": 1, "record": "status", "step": step, "wall_time": when, "sinks": {}})
    return records


def _state(run: RunLog) -> dict[str, Any]:
    """Everything the run keeps and knows: its facts and every group of kept records."""
    facts = {name: value for name, value in vars(run).items() if name not in ("kept", "_add_train")}  # not the spy
    return {**facts, **{f"kept.{name}": value for name, value in vars(run.kept).items()}}


@pytest.mark.parametrize("seed", range(40))
def test_train_steps_taken_at_once_keep_exactly_what_one_by_one_keeps(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same records through :meth:`RunLog.add_all` (runs of train steps at once) and through
    :meth:`RunLog.add` one at a time: the same kept records, bests, rates and cut outcome."""
    records = _log(seed)
    lines = [json.dumps(record, separators=(",", ":")) for record in records]
    one, many = RunLog(), RunLog()
    taken: list[bool] = []
    at_once = many._add_train

    def spy(lines: list[str], records: list[dict[str, Any]]) -> bool:
        taken.append(at_once(lines, records))
        return taken[-1]

    monkeypatch.setattr(many, "_add_train", spy)
    cut_one = [one.add(line, record) for line, record in zip(lines, parsed(lines, 1, "log"), strict=True)]
    cut_many = many.add_all(lines, parsed(lines, 1, "log"))
    assert cut_many == any(cut_one)
    assert _state(many) == _state(one)
    assert many.kept.lines() == one.kept.lines()
    assert (many.average, many.rate, many.stale_after()) == (one.average, one.rate, one.stale_after())
    assert True in taken  # the first run of steps, at least, was taken at once


def _write(path: Path, steps: int) -> None:
    """A finished run of ``steps`` steps, a checkpoint every 1,000, as EventLogSink writes it."""
    with path.open("w") as out:
        out.write(event_log_line("begin", step=0, wall_time=0.0, mode="train", keys=["accuracy", "loss"]))
        out.write(event_log_line("session_created", step=0, wall_time=0.0, mode="train", restored=False, rewound=False))
        for step in range(1, steps + 1):
            values = {"loss": 1.0 / step + (step % 7) * 1e-3, "accuracy": 0.5 + (step % 13) * 0.01}
            out.write(event_log_line("step", step=step, wall_time=step * 0.001, mode="train", **values))
            if step % 1000 == 0:
                saved = {"path": f"ckpt-{step}", "value": None, "wall_time": step * 0.001}
                out.write(event_log_line("checkpoint_saved", step=step, **saved))
        out.write(event_log_line("end", step=steps, wall_time=steps * 0.001, mode="train"))
        out.write(event_log_line("close", step=steps, wall_time=steps * 0.001, ended="finished"))


def _once_peak(path: Path) -> tuple[int, str]:
    """``hookbus watch --once`` on ``path``, in this process: its peak of traced bytes, its output."""
    out = io.StringIO()
    watch = Watch(path, RENDERING, live=False, console=Console(file=out), stale_after=None, dead_after=120, interval=1)
    gc.collect()
    tracemalloc.start()
    try:
        status = watch.once()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 0
    return peak, out.getvalue()


def test_watch_once_peak_memory_does_not_grow_with_the_logs_length(tmp_path: Path) -> None:
    """``--once`` on 20,000 and on 100,000 steps (both past one poll's 2 MiB piece): the longer
    log's peak of traced allocations is the shorter one's within 10 % and 256 KiB (before issue
    36: every record was kept, five times the memory for five times the log). The snapshot names
    each log's newest step, so both were read to their end."""
    short, long = tmp_path / "short.jsonl", tmp_path / "long.jsonl"
    _write(short, 20_000)
    _write(long, 100_000)
    _once_peak(short)  # the first call imports and caches what later calls only use
    short_peak, short_text = _once_peak(short)
    long_peak, long_text = _once_peak(long)
    assert "step 20000 |" in short_text
    assert "step 100000 |" in long_text
    assert long_peak <= short_peak * 1.1 + 256 * 1024, (short_peak, long_peak)
