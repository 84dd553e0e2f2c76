"""Per-step cost of hookbus on MonitoredTrainingSession, beside TensorFlow's hooks and the hand-written floor.

Every configuration gets its own graph and open MonitoredSession, all open at once in one
process; each round runs a chunk of steps in every configuration in turn, the order rotated
each round (``bench/_interleave.py``; the method and the table are described in
``bench/README.md``). Reported per configuration against ``bare``: the ratio of total time over
the rounds and of the median round, wall and CPU time; with ``--runs N`` (default 3) each run
is its own process and every figure is the median of the runs with their [min–max].

    python bench/overhead.py [--model linear|mlp|all] [--cadence realistic|every|all] [--runs 3]
                             [--rounds 30] [--chunk 1000] [--warmup 300] [--quick] [--json out.json]

Configurations (every one also has the StopAtStepHook that ``bare`` has):
    bare           StopAtStepHook only (it fetches the global step every step).
    native         TensorFlow's hooks doing the same work at the same cadence: LoggingTensorHook
                   (to a logging handler writing to /dev/null), SummarySaverHook (merged scalar
                   summaries of loss and accuracy), CheckpointSaverHook, NanTensorHook (no cadence:
                   it fetches the loss every step), StepCounterHook (steps/sec as a summary).
    floor          (realistic cadence only) the cheapest hand-written SessionRunHook doing the
                   same work as hookbus at the realistic cadence, as issue 30 defines it:
                   :class:`HandWrittenFloor`.
    hookbus        one EventBusHook with the equivalent sinks: ConsoleSink in plain mode to
                   /dev/null printing a line whenever it is due, TensorBoardSink, CSVSink,
                   CheckpointSink, NanGuardSink, EarlyStoppingSink (on the training loss).
    hookbus-quiet-lr  (realistic cadence) hookbus-quiet with this round's features on the hook:
                   the learning rate offered to the sinks (issue 27); quiet steps must cost what
                   hookbus-quiet's do.
    hookbus-quiet  the same sinks attached, on schedules that never come due while measured (the
                   console keeps its time rule, so the clock is still read every step).
    fetch-floor    a reference, not a target: one minimal SessionRunHook that only fetches loss and
                   accuracy at the most frequent step cadence (every 10 steps; every step) and
                   discards them. It is what TensorFlow's session machinery charges for bringing
                   values out through the hook API at all; any hook doing the work pays it.
    counting-hook  the quiet steps' reference (issue 39): one SessionRunHook that counts the step,
                   compares it with a due step never reached and returns nothing: the least a hook
                   that knows when it is due does on a quiet step.
    empty-hook     a reference, not a target: one SessionRunHook that overrides nothing: what
                   MonitoredSession charges for one more hook, before the hook does anything.

The models (``linear``: the demo's 0.3 ms linear regression; ``mlp``: about 1 ms a step) expose
``loss`` and ``accuracy`` (the share of predictions within 0.25, resp. 0.5, of the target), so
every configuration fetches those two.

Cadences:
    realistic  console / logging 4 per second, CSV and NaN guard every 10 steps, TensorBoard
               (summaries, steps/sec) and early stopping every 100, checkpoint every 1000.
    every      everything every step except the checkpoint (every 1000 still: a save per step
               would time the Saver, which both sides share).

Keep ``--chunk`` a multiple of 1000: every chunk then holds the same number of checkpoints.

Targets, judged on the median of the runs of the ratio of totals, in wall and in CPU time: issue 39:
hookbus-quiet and hookbus-quiet-lr <= 1.01 x counting-hook; issue 30: hookbus <= 1.00 x floor,
hookbus-quiet and hookbus-quiet-lr <= 1.01 x bare; issue 6: realistic hookbus <= 1.05 x bare and at
most a quarter of native's overhead; every step: hookbus no slower than native.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _interleave import cell, interleave, runs_of, share, spread, summarize  # noqa: E402
from _tf1_hooks import NEVER, EmptyHook, FetchFloor, build, hookbus_hook, native_hooks, tensorflow_logging_to  # noqa: E402

import hookbus  # noqa: E402

v1 = tf.compat.v1
CADENCES: dict[str, dict[str, float]] = {
    "realistic": {"console_secs": 0.25, "csv": 10, "nan": 10, "tb": 100, "es": 100, "ckpt": 1000},
    "every": {"console_secs": 0.0, "csv": 1, "nan": 1, "tb": 1, "es": 1, "ckpt": 1000},
}
CONFIGS = {
    "realistic": [
        "bare",
        "native",
        "floor",
        "hookbus",
        "hookbus-quiet",
        "hookbus-quiet-lr",
        "fetch-floor",
        "counting-hook",
        "empty-hook",
    ],
    "every": ["bare", "native", "hookbus", "fetch-floor"],
}


class HandWrittenFloor(v1.train.SessionRunHook):  # type: ignore[misc]
    """The floor (issue 30): the cheapest hand-written hook doing hookbus's work at the realistic cadence.

    Defined here, and only here, so it cannot drift: every 10 steps it fetches ``loss`` and
    ``accuracy`` as a dict, writes a CSV line (step, wall time, loss, accuracy: CSVSink's
    columns) to a file it keeps open, and checks the loss for NaN (a stop if it is not finite);
    every 100 steps it writes the two values as one TensorBoard summary through
    ``tf.compat.v1.summary.FileWriter``; every 1000 it calls ``Saver.save`` (TensorFlow's
    defaults: the meta graph each save, the state file, the last 5 kept). It counts steps
    itself from the global step read once at session creation, as a careful user would.
    """

    def __init__(self, loss: Any, accuracy: Any, directory: str) -> None:
        self.args = v1.train.SessionRunArgs({"loss": loss, "accuracy": accuracy})
        self.directory = directory
        self.step = 0

    def begin(self) -> None:
        self.saver = v1.train.Saver()
        self.writer = v1.summary.FileWriter(os.path.join(self.directory, "tb"))
        self.csv = open(os.path.join(self.directory, "metrics.csv"), "w")  # noqa: SIM115 - closed in end()
        self.csv.write("step,wall_time,loss,accuracy\n")

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.step = int(session.run(v1.train.get_global_step()))

    def before_run(self, run_context: Any) -> Any:
        self.step += 1
        return self.args if self.step % 10 == 0 else None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        step = self.step
        if step % 10 == 0:
            loss, accuracy = float(run_values.results["loss"]), float(run_values.results["accuracy"])
            self.csv.write(f"{step},{time.time()},{loss},{accuracy}\n")
            if math.isnan(loss):
                run_context.request_stop()
            if step % 100 == 0:
                values = [
                    v1.Summary.Value(tag="loss", simple_value=loss),
                    v1.Summary.Value(tag="accuracy", simple_value=accuracy),
                ]
                self.writer.add_summary(v1.Summary(value=values), step)
        if step % 1000 == 0:
            self.saver.save(run_context.session, os.path.join(self.directory, "model.ckpt"), global_step=step)

    def end(self, session: Any) -> None:
        self.csv.close()
        self.writer.close()


@dataclass
class Config:
    """One open configuration."""

    name: str
    session: Any
    train_op: Any


def open_config(name: str, kind: str, cadence: dict[str, float], stack: contextlib.ExitStack, sink_file: Any) -> Config:
    graph = tf.Graph()
    directory = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-{name}-"))
    with graph.as_default():
        model = build(kind)
        hooks: list[Any] = [v1.train.StopAtStepHook(last_step=NEVER)]
        if name == "native":
            hooks += native_hooks(model, directory, cadence)
        elif name == "floor":
            hooks.append(HandWrittenFloor(model.loss, model.accuracy, directory))
        elif name == "fetch-floor":
            hooks.append(FetchFloor({"loss": model.loss, "accuracy": model.accuracy}, int(cadence["csv"])))
        elif name == "counting-hook":
            hooks.append(FetchFloor({}, NEVER))
        elif name == "empty-hook":
            hooks.append(EmptyHook())
        elif name.startswith("hookbus"):
            quiet = name.startswith("hookbus-quiet")
            bus, hook = hookbus_hook(model, directory, cadence, quiet, sink_file, rate=name == "hookbus-quiet-lr")
            stack.enter_context(bus)
            hooks.append(hook)
        session = stack.enter_context(hookbus.monitored_training_session(hooks=hooks))
    return Config(name, session, model.train_op)


def run_steps(config: Config, steps: int) -> int:
    """Run ``steps`` training steps; return ``steps``."""
    run, op = config.session.run, config.train_op
    for _ in range(steps):
        run(op)
    return steps


def measure(kind: str, cadence_name: str, rounds: int, chunk: int, warmup: int) -> dict[str, Any]:
    """One run: interleaved rounds of every configuration for one model and cadence (raw series)."""
    cadence = CADENCES[cadence_name]
    with contextlib.ExitStack() as stack:
        sink_file = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack
        stack.enter_context(tensorflow_logging_to(sink_file))
        configs = {n: open_config(n, kind, cadence, stack, sink_file) for n in CONFIGS[cadence_name]}
        for config in configs.values():
            run_steps(config, warmup)
        series = interleave(list(configs), lambda name: run_steps(configs[name], chunk), rounds)
    return {"model": kind, "cadence": cadence_name, "series": series}


def figures(raw_groups: list[dict[str, Any]]) -> dict[str, Any]:
    """One model and cadence across runs: every configuration against bare, hookbus against the floor."""
    runs = [summarize(g["series"], "bare") for g in raw_groups]
    group: dict[str, Any] = {"model": raw_groups[0]["model"], "cadence": raw_groups[0]["cadence"], "rows": spread(runs)}
    if "floor" in raw_groups[0]["series"]:
        group["hookbus_x_floor"] = spread([summarize(g["series"], "floor") for g in raw_groups])["hookbus"]
    if "counting-hook" in raw_groups[0]["series"]:
        quiet = spread([summarize(g["series"], "counting-hook") for g in raw_groups])
        group["quiet_x_counting"] = {k: quiet[k] for k in ("hookbus-quiet", "hookbus-quiet-lr")}
    shares = [{k: share(run, k, "native") for k in ("x_wall", "x_cpu")} for run in runs]
    group["hookbus_share_of_native_overhead"] = spread([{"share": s} for s in shares])["share"]
    return group


def check_targets(group: dict[str, Any]) -> list[tuple[str, bool]]:
    """The issues' targets for one group, on the median of the runs of the ratio of totals.

    A target is met when it holds in wall time and in CPU time: under load, wall time spreads
    far more between runs than CPU time does.
    """
    rows, label = group["rows"], f"{group['model']}/{group['cadence']}"

    def median(row: dict[str, Any], key: str) -> float:
        return float(row[key]["median"])

    def judged(text: str, row: dict[str, Any], wall_limit: float, cpu_limit: float) -> tuple[str, bool]:
        wall, cpu = median(row, "x_wall"), median(row, "x_cpu")
        limits = f"{wall_limit:.2f}" if wall_limit == cpu_limit else f"{wall_limit:.3f} / {cpu_limit:.3f}"
        return f"{label}: {text}: wall {wall:.3f} / CPU {cpu:.3f} <= {limits}", wall <= wall_limit and cpu <= cpu_limit

    if group["cadence"] != "realistic":
        native = rows["native"]
        return [
            judged(
                "hookbus x bare <= native x bare (issue 6)",
                rows["hookbus"],
                median(native, "x_wall"),
                median(native, "x_cpu"),
            )
        ]
    return [
        judged("hookbus x floor (issue 30)", group["hookbus_x_floor"], 1.00, 1.00),
        judged("hookbus-quiet x counting-hook (issue 39)", group["quiet_x_counting"]["hookbus-quiet"], 1.01, 1.01),
        judged(
            "hookbus-quiet-lr x counting-hook (issue 39)", group["quiet_x_counting"]["hookbus-quiet-lr"], 1.01, 1.01
        ),
        judged("hookbus-quiet x bare (issue 30)", rows["hookbus-quiet"], 1.01, 1.01),
        judged("hookbus-quiet-lr x bare (issue 30, this round's features)", rows["hookbus-quiet-lr"], 1.01, 1.01),
        judged("hookbus x bare (issue 6)", rows["hookbus"], 1.05, 1.05),
        judged("hookbus overhead / native overhead (issue 6)", group["hookbus_share_of_native_overhead"], 0.25, 0.25),
    ]


COLUMNS = (
    ("x_wall", "x bare wall"),
    ("x_wall_median", "x bare wall med"),
    ("x_cpu", "x bare CPU"),
    ("x_cpu_median", "x bare CPU med"),
)


def print_table(result: dict[str, Any]) -> None:
    runs = result["runs"]
    print(
        f"TF {result['tensorflow']}, Python {result['python']}, {result['machine']}; {runs} run(s) x "
        f"{result['rounds']} rounds x {result['chunk']} steps; load {result['load']}"
    )
    print("each figure: median of the runs [min–max]; x: ratio of totals over the rounds, 'med': of the median round")
    width = 20 if runs > 1 else 9
    header = f"{'model':<7} {'cadence':<10} {'config':<16} {'µs/step':>8} {'CPU µs':>8} " + " ".join(
        f"{title:>{width}}" for _, title in COLUMNS
    )
    print(header)
    print("-" * len(header))
    for group in result["groups"]:
        named = list(group["rows"].items())
        if "hookbus_x_floor" in group:
            named.append(("hookbus/floor", group["hookbus_x_floor"]))
        for quiet, row in group.get("quiet_x_counting", {}).items():
            named.append((f"{quiet.removeprefix('hookbus-')}/counting", row))
        for name, row in named:
            us = "" if "/" in name else f"{row['wall_us']['median']:>8.1f} {row['cpu_us']['median']:>8.1f}"
            print(
                f"{group['model']:<7} {group['cadence']:<10} {name:<16} {us:>17} "
                + " ".join(f"{cell(row[key]):>{width}}" for key, _ in COLUMNS)
            )
        share = group["hookbus_share_of_native_overhead"]
        print(
            f"{'':<35}hookbus overhead / native overhead: wall {cell(share['x_wall'], 2)}, "
            f"CPU {cell(share['x_cpu'], 2)}"
        )
    print("targets (median of the runs, ratio of totals; met when met in wall and in CPU time):")
    for text, ok in result["targets"]:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", choices=["linear", "mlp", "all"], default="all")
    parser.add_argument("--cadence", choices=[*sorted(CADENCES), "all"], default="all")
    parser.add_argument("--runs", type=int, default=3, help="separate processes, for the spread between runs")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--chunk", type=int, default=1000, help="steps per configuration per round")
    parser.add_argument("--warmup", type=int, default=300, help="steps per configuration before timing")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 runs of 2 rounds of 20 steps")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    parser.add_argument("--raw", default=None, metavar="PATH", help=argparse.SUPPRESS)  # one run, for --runs
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.chunk, args.warmup = 2, 20, 5
        args.runs = min(args.runs, 2)
    models = ["linear", "mlp"] if args.model == "all" else [args.model]
    cadences = ["realistic", "every"] if args.cadence == "all" else [args.cadence]

    def measure_here() -> list[dict[str, Any]]:
        v1.disable_eager_execution()
        np.set_printoptions(suppress=True)
        return [measure(m, c, args.rounds, args.chunk, args.warmup) for m in models for c in cadences]

    runs = runs_of(os.path.abspath(__file__), argv, args.runs, args.raw, measure_here)
    if args.raw:
        return runs[0]  # one of several runs: its result is in args.raw
    groups = [figures([run["groups"][i] for run in runs]) for i in range(len(runs[0]["groups"]))]
    result: dict[str, Any] = {
        "benchmark": "overhead",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "runs": len(runs),
        "rounds": args.rounds,
        "chunk": args.chunk,
        "warmup": args.warmup,
        "groups": groups,
        "raw": runs,
    }
    result["targets"] = [check for g in groups for check in check_targets(g)]
    print_table(result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
