"""Smoke test of the benchmarks: each runs with ``--quick`` and writes the rows it promises.

Not a timing test: nothing here asserts on a duration or a ratio (those are ``bench/``'s to
report). Each runs in its own process, a test of its own.
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
BENCHES = ("overhead", "dispatch", "keras_overhead", "watch", "startup", "slow_subscriber", "sweep", "system_metrics")
ROW_FIELDS = {"wall_us", "cpu_us", "wall_median_us", "x_wall", "x_wall_median", "x_cpu", "x_cpu_median", "x_thread"}
SPREAD = {"median", "min", "max", "runs"}
RUNS = 2  # --quick runs two processes: the smallest run count with a spread


def check_figures(row: dict[str, Any]) -> None:
    """Every figure of a row is a spread over the runs: median within [min, max], one value a run."""
    assert set(row) == ROW_FIELDS
    for figure in row.values():
        assert set(figure) == SPREAD
        assert len(figure["runs"]) == RUNS
        assert figure["min"] <= figure["median"] <= figure["max"]
    assert row["wall_us"]["min"] > 0
    assert row["cpu_us"]["min"] > 0


def check_raw(result: dict[str, Any], configs: dict[Any, set[str]], key: str) -> None:
    """Each run kept its per-round seconds per step, by clock, for every configuration."""
    assert len(result["raw"]) == result["runs"] == RUNS
    for run in result["raw"]:
        for group in run["groups"]:
            series = group["series"]
            assert set(series) == configs[group[key]]
            for clocks in series.values():
                assert set(clocks) == {"wall", "cpu", "thread"}
                assert all(len(times) == result["rounds"] for times in clocks.values())


def check_overhead(result: dict[str, Any]) -> None:
    groups = {(g["model"], g["cadence"]): g for g in result["groups"]}
    assert set(groups) == {(m, c) for m in ("linear", "mlp") for c in ("realistic", "every")}
    configs = {
        "realistic": {
            "bare",
            "native",
            "floor",
            "hookbus",
            "hookbus-quiet",
            "hookbus-quiet-lr",
            "fetch-floor",
            "counting-hook",
            "empty-hook",
        },
        "every": {"bare", "native", "hookbus", "fetch-floor"},
    }
    for (_, cadence), group in groups.items():
        assert set(group["rows"]) == configs[cadence]
        for row in group["rows"].values():
            check_figures(row)
        assert group["rows"]["bare"]["x_wall"]["runs"] == [pytest.approx(1.0)] * RUNS
        assert set(group["hookbus_share_of_native_overhead"]) == {"x_wall", "x_cpu"}
        if cadence == "realistic":  # hookbus against the hand-written floor, quiet against counting
            check_figures(group["hookbus_x_floor"])
            assert set(group["quiet_x_counting"]) == {"hookbus-quiet", "hookbus-quiet-lr"}
            for row in group["quiet_x_counting"].values():
                check_figures(row)
        else:
            assert "hookbus_x_floor" not in group
    check_raw(result, configs, "cadence")
    assert result["targets"], "the targets are judged"
    assert any("x floor" in text for text, _ in result["targets"])


def check_dispatch(result: dict[str, Any]) -> None:
    assert [row["subscribers"] for row in result["dispatch"]] == [1, 6, 20]
    for row in result["dispatch"]:
        assert row["hookbus_min_us"] > 0
        assert row["blinker_min_us"] > 0
        assert row["quiet_min_us"] > 0
    steering = {row["subscriber"]: row for row in result["steering"]}
    assert set(steering) == {"no-op function", "ReduceLROnPlateauSink", "LearningRateSchedulerSink"}
    assert all(row["due_min_us"] > 0 for row in steering.values())
    writers = {row["writer"]: row for row in result["writers"]}
    expected = {"TensorBoardSink", "tf.summary (eager)", "CSVSink", "csv.writer", "EventLogSink", "MLflowSink"}
    assert set(writers) == expected
    for row in writers.values():
        assert row["train_thread_rows_per_s_max"] > 0
        assert row["end_to_end_rows_per_s_max"] > 0
        # CPU per row beside the rates: the training thread's, and the process's until flushed.
        assert 0 < row["train_thread_cpu_us_per_row_median"] <= row["process_cpu_us_per_row_median"] + 0.5


def check_keras(result: dict[str, Any]) -> None:
    assert [g["steps_per_execution"] for g in result["groups"]] == [1, 32]
    for group in result["groups"]:
        assert set(group["rows"]) == {"none", "keras", "hookbus"}
        for row in group["rows"].values():
            check_figures(row)
        assert set(group["hookbus_share_of_keras_overhead"]) == {"x_wall", "x_cpu"}
        # the same TensorBoard work on both sides (Keras's update_freq counts executions)
        rows = group["tensorboard_rows"]
        assert rows["keras"] == rows["hookbus"], rows
        assert all(r > 0 for r in rows["keras"]), rows
    check_raw(result, {1: {"none", "keras", "hookbus"}, 32: {"none", "keras", "hookbus"}}, "steps_per_execution")
    assert result["targets"], "the targets are judged"


def check_watch(result: dict[str, Any]) -> None:
    assert result["sizes"], "at least one log length"
    for size in result["sizes"].values():
        assert size["log_bytes"] > 0
        for side in ("bare", "watch"):  # the watcher beside a bare json.loads pass over the same log
            assert size[side]["wall_s"] > 0
            assert size[side]["peak_rss_mib"] > 0
            assert len(size[side]["runs"]) == result["rounds"]
    assert result["imports"]["peak_rss_mib"] > 0  # the interpreter with its imports, on a 10-line log
    live = result["live"]
    assert live["exit_status"] == 0
    steps = [s["step"] for s in live["samples"]]
    assert steps == sorted(steps)
    assert str(steps[-1]) in result["sizes"]


def check_startup(result: dict[str, Any]) -> None:
    assert [g["api"] for g in result["groups"]] == ["tf1"]  # --quick: the TF1 session only
    (group,) = result["groups"]
    assert group["data_bytes"] >= result["mb"] * 2**20 * 0.99  # the checkpoint has the size asked for
    configs = {"native", "hookbus", "hookbus-full-read"}
    assert set(group["rows"]) == configs
    for row in group["rows"].values():
        assert set(row) == {"imported", "ready", "first_step", "cpu_s"}
        for figure in row.values():
            assert len(figure["runs"]) == result["rounds"] == RUNS
            assert figure["min"] <= figure["median"] <= figure["max"]
        for imported, ready, first in zip(*(row[p]["runs"] for p in ("imported", "ready", "first_step")), strict=True):
            assert 0 < imported <= ready <= first  # process start, TensorFlow imported, restored, one step
    assert set(group["x_native"]) == {"hookbus", "hookbus-full-read"}
    assert set(group["x_native_cpu"]) == {"hookbus", "hookbus-full-read"}
    assert set(group["restore_s"]) == configs
    assert set(group["x_native_restore"]) == {"hookbus", "hookbus-full-read"}
    assert result["targets"], "the targets are judged"


def check_slow_subscriber(result: dict[str, Any]) -> None:
    rows = result["rows"]
    assert set(rows) == {"none", "inline", "background"}
    for row in rows.values():
        assert set(row) == ROW_FIELDS | {"fit_us", "fit_x_wall"}
        check_figures({k: v for k, v in row.items() if k in ROW_FIELDS})
        assert row["fit_us"]["min"] > 0
    assert rows["none"]["fit_x_wall"]["runs"] == [pytest.approx(1.0)] * RUNS
    steps = result["steps_per_fit"]
    for counts in result["background"]:  # one post every `every` steps of each fit, each delivered
        assert counts == {"delivered": result["rounds"] * (steps // result["every"]), "lost": 0}
    assert result["targets"], "the targets are judged"


def check_sweep(result: dict[str, Any]) -> None:
    """The table's process for each sweep size and the long run, exiting with the runs' state (all
    finished: 0), and the follower's share of a core."""
    assert set(result["first_table"]) == {"1", "3"}
    for row in [*result["first_table"].values(), result["long_run"]]:
        assert {"wall_s", "cpu_s", "peak_rss_mib", "status"} <= set(row)
        assert row["status"] == 0
    assert result["long_run"]["log_mib"] > 0
    assert result["following"]["runs"] == 3
    assert "core_share" in result["following"]


def check_system_metrics(result: dict[str, Any]) -> None:
    assert set(result["idle_percent_of_a_core"]) == {"off", "on"}
    for figure in [*result["idle_percent_of_a_core"].values(), result["sampler_percent_of_a_core"]]:
        assert set(figure) == SPREAD
        assert len(figure["runs"]) == RUNS
        assert figure["min"] <= figure["median"] <= figure["max"]
    sample = result["per_sample"]
    assert sample["cpu_ms_per_sample"] > 0
    assert sample["bytes_per_sample"] > 0
    assert sample["keys_per_sample"] >= 6  # the host's and this process's, at least
    assert result["targets"], "the targets are judged"


CHECKS = {
    "overhead": check_overhead,
    "dispatch": check_dispatch,
    "keras_overhead": check_keras,
    "watch": check_watch,
    "startup": check_startup,
    "slow_subscriber": check_slow_subscriber,
    "sweep": check_sweep,
    "system_metrics": check_system_metrics,
}


@pytest.mark.subprocess
@pytest.mark.parametrize("name", BENCHES)
def test_every_benchmark_runs_quick_and_writes_its_rows(tmp_path: Path, name: str) -> None:
    # One test per benchmark, so that the parallel suite spreads them over its workers: eight started
    # at once on two cores are each slowed past what any of them meets alone.
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    out = tmp_path / f"{name}.json"
    command = [sys.executable, str(ROOT / "bench" / f"{name}.py"), "--quick", "--json", str(out)]
    run = subprocess.run(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240
    )
    output = run.stdout
    assert run.returncode == 0, f"bench/{name}.py --quick failed:\n{output[-3000:]}"
    assert "targets" in output or name in ("dispatch", "watch"), output[-3000:]  # the table was printed
    assert "[" in output or name in ("dispatch", "watch", "sweep"), output[-3000:]  # the spread of the runs
    CHECKS[name](json.loads(out.read_text()))
