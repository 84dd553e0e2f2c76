"""Smoke test of the benchmarks: each runs with ``--quick`` and writes the rows it promises.

Not a timing test: nothing here asserts on a duration or a ratio (those are ``bench/``'s to
report). The three run side by side, each in its own process, to keep the test short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHES = ("overhead", "dispatch", "keras_overhead")
ROW_FIELDS = {"min_us", "median_us", "ratio_min", "ratio_median", "ratio_paired"}


def check_overhead(result: dict[str, Any]) -> None:
    groups = {(g["model"], g["cadence"]): g for g in result["groups"]}
    assert set(groups) == {(m, c) for m in ("linear", "mlp") for c in ("realistic", "every")}
    for (_, cadence), group in groups.items():
        quiet = {"hookbus-quiet"} if cadence == "realistic" else set()
        expected = {"bare", "native", "hookbus", "fetch-floor"} | quiet
        assert set(group["rows"]) == expected
        for row in group["rows"].values():
            assert set(row) == ROW_FIELDS
            assert row["min_us"] > 0
        assert group["rows"]["bare"]["ratio_min"] == pytest.approx(1.0)
    assert result["targets"], "the targets are judged"


def check_dispatch(result: dict[str, Any]) -> None:
    assert [row["subscribers"] for row in result["dispatch"]] == [1, 6, 20]
    for row in result["dispatch"]:
        assert row["hookbus_min_us"] > 0
        assert row["blinker_min_us"] > 0
        assert row["quiet_min_us"] > 0
    writers = {row["writer"]: row for row in result["writers"]}
    assert set(writers) == {"TensorBoardSink", "tf.summary (eager)", "CSVSink", "csv.writer", "EventLogSink"}
    for row in writers.values():
        assert row["train_thread_rows_per_s_max"] > 0
        assert row["end_to_end_rows_per_s_max"] > 0


def check_keras(result: dict[str, Any]) -> None:
    assert [g["steps_per_execution"] for g in result["groups"]] == [1, 32]
    for group in result["groups"]:
        assert set(group["rows"]) == {"none", "keras", "hookbus"}
        for row in group["rows"].values():
            assert set(row) == ROW_FIELDS
    assert result["targets"], "the targets are judged"


CHECKS = {"overhead": check_overhead, "dispatch": check_dispatch, "keras_overhead": check_keras}


@pytest.mark.subprocess
def test_every_benchmark_runs_quick_and_writes_its_rows(tmp_path: Path) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    runs = {}
    for name in BENCHES:
        out = tmp_path / f"{name}.json"
        command = [sys.executable, str(ROOT / "bench" / f"{name}.py"), "--quick", "--json", str(out)]
        log = (tmp_path / f"{name}.log").open("w")
        runs[name] = (subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT), out, log)
    try:
        for name, (process, out, log) in runs.items():
            code = process.wait(timeout=240)
            log.close()
            output = (tmp_path / f"{name}.log").read_text()
            assert code == 0, f"bench/{name}.py --quick failed:\n{output[-3000:]}"
            assert "targets" in output or name == "dispatch", output[-3000:]  # the table was printed
            CHECKS[name](json.loads(out.read_text()))
    finally:
        for process, _, log in runs.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
