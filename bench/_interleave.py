"""The side-by-side method the benchmarks share: interleaved rounds, ratios of totals, runs.

One *run* opens every configuration at once in one process and measures *rounds*: each round
runs one chunk in every configuration in turn, the order rotated by one each round, so machine
noise (other processes, frequency changes) falls on all of them alike. Each chunk is timed three
ways: wall time (``time.perf_counter``), process CPU time (``time.process_time``: every thread,
the writers' and TensorFlow's included) and the calling thread's CPU time
(``time.thread_time``: the training thread alone).

Per run and configuration, against a base configuration: the ratio of the totals over all
rounds (``x_wall``, ``x_cpu``, ``x_thread``) and the ratio of the median rounds
(``x_wall_median``, ``x_cpu_median``). Several runs are separate processes (:func:`repeat`);
every figure is then reported as the median of the runs with their minimum and maximum, the
spread between runs.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

#: What one run keeps of a configuration: seconds per step of each round, by clock.
Series = dict[str, list[float]]
CLOCKS = ("wall", "cpu", "thread")
#: Per-run figures of a configuration: microseconds per step, then ratios against the base.
FIELDS = ("wall_us", "cpu_us", "wall_median_us", "x_wall", "x_wall_median", "x_cpu", "x_cpu_median", "x_thread")


def interleave(names: Sequence[str], run_chunk: Callable[[str], int], rounds: int) -> dict[str, Series]:
    """Run ``rounds`` rounds of one chunk per configuration, the order rotated each round.

    Args:
        names: The configurations, in their starting order.
        run_chunk: Runs one chunk of configuration ``name`` and returns the steps it ran.
        rounds: How many rounds.

    Returns:
        Per configuration, seconds per step of each round for each of :data:`CLOCKS`.
    """
    series: dict[str, Series] = {name: {clock: [] for clock in CLOCKS} for name in names}
    order = list(names)
    for r in range(rounds):
        shift = r % len(order)
        for name in order[shift:] + order[:shift]:
            wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
            steps = run_chunk(name)
            cpu, thread = time.process_time() - cpu, time.thread_time() - thread
            wall = time.perf_counter() - wall
            for clock, seconds in zip(CLOCKS, (wall, cpu, thread), strict=True):
                series[name][clock].append(seconds / steps)
    return series


def summarize(series: dict[str, Series], base: str) -> dict[str, dict[str, float]]:
    """Per-run figures (:data:`FIELDS`) of every configuration in ``series`` against ``base``.

    Every chunk of a run has the same number of steps, so the mean of the per-round seconds
    per step is the total time over the total steps.
    """
    ref = series[base]

    def ratio_of_totals(s: Series, clock: str) -> float:
        return sum(s[clock]) / sum(ref[clock])

    def ratio_of_medians(s: Series, clock: str) -> float:
        return statistics.median(s[clock]) / statistics.median(ref[clock])

    return {
        name: {
            "wall_us": statistics.fmean(s["wall"]) * 1e6,
            "cpu_us": statistics.fmean(s["cpu"]) * 1e6,
            "wall_median_us": statistics.median(s["wall"]) * 1e6,
            "x_wall": ratio_of_totals(s, "wall"),
            "x_wall_median": ratio_of_medians(s, "wall"),
            "x_cpu": ratio_of_totals(s, "cpu"),
            "x_cpu_median": ratio_of_medians(s, "cpu"),
            "x_thread": ratio_of_totals(s, "thread"),
        }
        for name, s in series.items()
    }


def share(run: dict[str, dict[str, float]], key: str, theirs: str, ours: str = "hookbus") -> float:
    """``ours``'s overhead over the base (figure ``key`` of a :func:`summarize` run) as a share of
    ``theirs``'s: 0.5 when it adds half as much (``nan`` if ``theirs`` costs nothing)."""
    their_over = run[theirs][key] - 1
    return (run[ours][key] - 1) / their_over if their_over > 0 else math.nan


def spread(per_run: Sequence[dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each figure of :func:`summarize` across runs: ``median``, ``min``, ``max`` and the ``runs``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in per_run[0]:
        out[name] = {}
        for key in per_run[0][name]:
            values = [run[name][key] for run in per_run]
            out[name][key] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
                "runs": values,
            }
    return out


def cell(figure: dict[str, Any], digits: int = 3) -> str:
    """``median [min–max]`` of a :func:`spread` figure (the median alone for one run)."""
    text = f"{figure['median']:.{digits}f}"
    if len(figure["runs"]) > 1:
        text += f" [{figure['min']:.{digits}f}–{figure['max']:.{digits}f}]"
    return text


def repeat(script: str, argv: Sequence[str], runs: int) -> list[dict[str, Any]]:
    """Run ``script`` ``runs`` times, one process after the other, and return each run's raw result.

    Each process gets ``argv`` (without any ``--runs`` or ``--json``) plus ``--raw PATH`` and
    writes its measurements there instead of printing a table. Separate processes make the
    spread between runs include what differs between processes (thread placement, memory
    layout, TensorFlow's start-up), not only the machine's noise.
    """
    passed = _without(list(argv), ("--runs", "--json", "--raw"))
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-runs-") as directory:
        for i in range(runs):
            path = os.path.join(directory, f"run{i}.json")
            print(f"run {i + 1}/{runs} ...", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, script, *passed, "--raw", path], check=True)
            with open(path) as fh:
                results.append(json.load(fh))
    return results


def runs_of(
    script: str, argv: Sequence[str], runs: int, raw: str | None, measure: Callable[[], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Each run's raw result (``{"groups": ...}``): one measured here, or ``runs`` processes (:func:`repeat`).

    With ``raw`` (this process is one of :func:`repeat`'s) the one run measured here is also
    written there (the caller then prints nothing).

    Args:
        script: The benchmark's own file, run again for each of several runs.
        argv: Its arguments, passed on to each run.
        runs: How many runs (``--runs``).
        raw: ``--raw``: the path this run's result goes to, or ``None``.
        measure: Measures one run here: its groups.
    """
    if raw is None and runs != 1:
        return repeat(script, argv, runs)
    run = {"groups": measure()}
    if raw is not None:
        with open(raw, "w") as fh:
            json.dump(run, fh)
    return [run]


def _without(argv: list[str], options: Sequence[str]) -> list[str]:
    """``argv`` without ``options`` and their values (``--opt v`` or ``--opt=v``)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not any(arg.startswith(option + "=") for option in options):
            kept.append(arg)
    return kept
