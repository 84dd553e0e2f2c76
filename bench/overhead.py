"""Per-step cost of hookbus on MonitoredTrainingSession, side by side with TensorFlow's own hooks.

Every configuration gets its own graph and open MonitoredSession; each round runs a chunk of
steps in every configuration in turn (interleaved, the order rotated each round), so machine
noise hits all of them alike. Reported per configuration: min and median seconds per step over
the rounds, and ratios against ``bare`` (min over min, median over median, and the median of
the per-round ratios).

    python bench/overhead.py [--model linear|mlp|all] [--cadence realistic|every|all]
                             [--rounds 30] [--chunk 1000] [--warmup 300] [--quick] [--json out.json]

Configurations (every one also has the StopAtStepHook that ``bare`` has):
    bare           StopAtStepHook only (it fetches the global step every step).
    native         TensorFlow's hooks doing the same work at the same cadence: LoggingTensorHook
                   (to a logging handler writing to /dev/null), SummarySaverHook (merged scalar
                   summaries of loss and accuracy), CheckpointSaverHook, NanTensorHook (no cadence:
                   it fetches the loss every step), StepCounterHook (steps/sec as a summary).
    hookbus        one EventBusHook with the equivalent sinks: ConsoleSink in plain mode to
                   /dev/null printing a line whenever it is due, TensorBoardSink, CSVSink,
                   CheckpointSink, NanGuardSink, EarlyStoppingSink (on the training loss).
    hookbus-quiet  the same sinks attached, on schedules that never come due while measured (the
                   console keeps its time rule, so the clock is still read every step).
    fetch-floor    a reference, not a target: one minimal SessionRunHook that only fetches loss and
                   accuracy at the most frequent step cadence (every 10 steps; every step) and
                   discards them. It is what TensorFlow's session machinery charges for bringing
                   values out through the hook API at all; any hook doing the work pays it.

Cadences:
    realistic  console / logging 4 per second, CSV and NaN guard and early stopping every 10
               steps, TensorBoard (summaries, steps/sec) every 100, checkpoint every 1000.
    every      everything every step except the checkpoint (every 1000 still: a save per step
               would time the Saver, which both sides share).

Keep ``--chunk`` a multiple of 1000: every chunk then holds the same number of checkpoints.

Targets (issue 6): hookbus-quiet <= 1.02 x bare; realistic hookbus <= 1.05 x bare and at most a
quarter of native's overhead; every step: hookbus no slower than native. Each is judged on the
ratio of the minima and on the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from rich.console import Console  # noqa: E402

import hookbus  # noqa: E402
from hookbus._demo import build_linear_regression  # noqa: E402
from hookbus.sinks import (  # noqa: E402
    CheckpointSink,
    ConsoleSink,
    CSVSink,
    EarlyStoppingSink,
    NanGuardSink,
    TensorBoardSink,
)

v1 = tf.compat.v1
NEVER = 10**9  # a step multiple no benchmark reaches: attached, never due
CADENCES: dict[str, dict[str, float]] = {
    "realistic": {"console_secs": 0.25, "csv": 10, "nan": 10, "tb": 100, "ckpt": 1000},
    "every": {"console_secs": 0.0, "csv": 1, "nan": 1, "tb": 1, "ckpt": 1000},
}
CONFIGS = {
    "realistic": ["bare", "native", "hookbus", "hookbus-quiet", "fetch-floor"],
    "every": ["bare", "native", "hookbus", "fetch-floor"],
}


class FetchFloor(v1.train.SessionRunHook):  # type: ignore[misc]
    """Fetches ``fetches`` every ``n`` training steps and does nothing with them."""

    def __init__(self, fetches: dict[str, Any], n: int) -> None:
        self.args = v1.train.SessionRunArgs(fetches)
        self.n = n
        self.count = 0

    def before_run(self, run_context: Any) -> Any:
        self.count += 1
        return self.args if self.count % self.n == 0 else None


@dataclass
class Model:
    """The tensors a configuration needs."""

    loss: Any
    accuracy: Any
    train_op: Any
    summary: Any


def _dense(x: Any, units: int, name: str, activation: Any = None) -> Any:
    with v1.variable_scope(name):
        w = v1.get_variable("kernel", [int(x.shape[-1]), units], initializer=v1.glorot_uniform_initializer())
        b = v1.get_variable("bias", [units], initializer=v1.zeros_initializer())
    y = tf.matmul(x, w) + b
    return activation(y) if activation is not None else y


def build(kind: str) -> Model:
    """The seed's linear regression, or a wider MLP (about a millisecond per step on 2 cores)."""
    if kind == "linear":
        m = build_linear_regression()
        loss, accuracy, train_op = m.loss, m.accuracy, m.train_op
    else:
        global_step = v1.train.get_or_create_global_step()
        x = v1.random_normal([64, 128], seed=1)
        y = tf.reduce_sum(x[:, :8], axis=1, keepdims=True)
        h = x
        for i in range(2):
            h = _dense(h, 128, f"dense{i}", tf.nn.relu)
        prediction = _dense(h, 1, "out")
        loss = tf.reduce_mean(tf.square(prediction - y), name="loss")
        accuracy = tf.reduce_mean(tf.cast(tf.abs(prediction - y) < 0.5, tf.float32), name="accuracy")
        train_op = v1.train.AdamOptimizer(1e-4).minimize(loss, global_step=global_step)
    v1.summary.scalar("loss", loss)
    v1.summary.scalar("accuracy", accuracy)
    return Model(loss, accuracy, train_op, v1.summary.merge_all())


def native_hooks(model: Model, directory: str, cadence: dict[str, float]) -> list[Any]:
    """TensorFlow's own hooks at ``cadence``."""
    secs = cadence["console_secs"]
    logging_hook = (
        v1.train.LoggingTensorHook({"loss": model.loss, "accuracy": model.accuracy}, every_n_secs=secs)
        if secs
        else v1.train.LoggingTensorHook({"loss": model.loss, "accuracy": model.accuracy}, every_n_iter=1)
    )
    return [
        logging_hook,
        v1.train.SummarySaverHook(save_steps=int(cadence["tb"]), output_dir=directory, summary_op=model.summary),
        v1.train.CheckpointSaverHook(directory, save_steps=int(cadence["ckpt"])),
        v1.train.NanTensorHook(model.loss),
        v1.train.StepCounterHook(every_n_steps=int(cadence["tb"]), output_dir=directory),
    ]


def hookbus_hook(
    model: Model, directory: str, cadence: dict[str, float], quiet: bool, sink_file: Any
) -> tuple[hookbus.EventBus, hookbus.EventBusHook]:
    """One EventBusHook and the sinks equivalent to :func:`native_hooks` (never due if ``quiet``)."""

    def steps(n: float) -> int:
        return NEVER if quiet else int(n)

    bus = hookbus.EventBus()
    console = Console(file=sink_file, force_terminal=False, width=120)
    if quiet:  # the time rule stays (the clock is read every step); it fires once, in the warm-up
        schedule: dict[str, Any] = {"every_n_secs": 1e6}
    elif cadence["console_secs"]:
        schedule = {"every_n_secs": cadence["console_secs"]}
    else:
        schedule = {"every_n_steps": 1}
    # plain_every_n_secs=0: a line each time it is due, the work LoggingTensorHook does.
    bus.attach(ConsoleSink(console, live=False, plain_every_n_secs=0, **schedule))
    bus.attach(TensorBoardSink(os.path.join(directory, "tb"), every_n_steps=steps(cadence["tb"])))
    bus.attach(CSVSink(os.path.join(directory, "metrics.csv"), every_n_steps=steps(cadence["csv"])))
    bus.attach(
        CheckpointSink(os.path.join(directory, "ckpt"), every_n_steps=steps(cadence["ckpt"]), every_n_secs=None)
    )
    bus.attach(NanGuardSink("loss", every_n_steps=steps(cadence["nan"])))
    bus.attach(EarlyStoppingSink(monitor="loss", patience=NEVER, every_n_steps=steps(cadence["csv"])))
    hook = hookbus.EventBusHook(
        bus, fetches={"loss": model.loss, "accuracy": model.accuracy}, train_op=model.train_op
    )
    return bus, hook


@dataclass
class Config:
    """One open configuration and its per-round seconds per step."""

    name: str
    session: Any
    train_op: Any
    times: list[float] = field(default_factory=list)


def open_config(
    name: str, kind: str, cadence: dict[str, float], stack: contextlib.ExitStack, sink_file: Any
) -> Config:
    graph = tf.Graph()
    directory = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-{name}-"))
    with graph.as_default():
        model = build(kind)
        hooks: list[Any] = [v1.train.StopAtStepHook(last_step=NEVER)]
        if name == "native":
            hooks += native_hooks(model, directory, cadence)
        elif name == "fetch-floor":
            hooks.append(FetchFloor({"loss": model.loss, "accuracy": model.accuracy}, int(cadence["csv"])))
        elif name.startswith("hookbus"):
            bus, hook = hookbus_hook(model, directory, cadence, name == "hookbus-quiet", sink_file)
            stack.enter_context(bus)
            hooks.append(hook)
        session = stack.enter_context(hookbus.monitored_training_session(hooks=hooks))
    return Config(name, session, model.train_op)


def run_chunk(config: Config, steps: int) -> float:
    """Seconds per step over ``steps`` training steps."""
    run, op = config.session.run, config.train_op
    start = time.perf_counter()
    for _ in range(steps):
        run(op)
    return (time.perf_counter() - start) / steps


@contextlib.contextmanager
def tensorflow_logging_to(stream: Any) -> Iterator[None]:
    """Send TensorFlow's logger (LoggingTensorHook's output) at INFO to ``stream``, then restore."""
    logger = tf.get_logger()
    saved = (logger.handlers[:], logger.level, logger.propagate)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname).1s%(asctime)s %(filename)s:%(lineno)d] %(message)s"))
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers, level, logger.propagate = saved[0], saved[1], saved[2]
        logger.setLevel(level)


def measure(kind: str, cadence_name: str, rounds: int, chunk: int, warmup: int) -> dict[str, Any]:
    """Interleaved rounds of every configuration for one model and cadence."""
    cadence = CADENCES[cadence_name]
    names = CONFIGS[cadence_name]
    with contextlib.ExitStack() as stack:
        sink_file = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack
        stack.enter_context(tensorflow_logging_to(sink_file))
        configs = [open_config(n, kind, cadence, stack, sink_file) for n in names]
        for config in configs:
            run_chunk(config, warmup)
        for r in range(rounds):
            shift = r % len(configs)
            for config in configs[shift:] + configs[:shift]:
                config.times.append(run_chunk(config, chunk))
    bare = configs[0].times
    rows: dict[str, dict[str, float]] = {}
    for c in configs:
        rows[c.name] = {
            "min_us": min(c.times) * 1e6,
            "median_us": statistics.median(c.times) * 1e6,
            "ratio_min": min(c.times) / min(bare),
            "ratio_median": statistics.median(c.times) / statistics.median(bare),
            "ratio_paired": statistics.median(t / b for t, b in zip(c.times, bare, strict=True)),
        }
    share = {stat: _share(rows, stat) for stat in STATS}
    return {"model": kind, "cadence": cadence_name, "rows": rows, "hookbus_share_of_native_overhead": share}


#: The two estimates targets are judged on: the ratio of the fastest rounds (noise only adds
#: time, so the minimum is the least disturbed), and the median of the per-round ratios (each
#: round runs every configuration within seconds of the others).
STATS = ("ratio_min", "ratio_paired")


def _share(rows: dict[str, dict[str, float]], stat: str) -> float | None:
    native_over = rows["native"][stat] - 1
    return (rows["hookbus"][stat] - 1) / native_over if native_over > 0 else None


def check_targets(group: dict[str, Any]) -> list[tuple[str, bool]]:
    """The issue's targets for one group, each judged on both :data:`STATS`."""
    rows, label = group["rows"], f"{group['model']}/{group['cadence']}"
    checks: list[tuple[str, bool]] = []
    for stat in STATS:
        tag = f"{label} [{stat}]"
        if group["cadence"] == "realistic":
            quiet = rows["hookbus-quiet"][stat]
            checks.append((f"{tag}: hookbus-quiet {quiet:.3f} <= 1.02 x bare", quiet <= 1.02))
            ratio = rows["hookbus"][stat]
            checks.append((f"{tag}: hookbus {ratio:.3f} <= 1.05 x bare", ratio <= 1.05))
            share = group["hookbus_share_of_native_overhead"][stat]
            shown = "n/a" if share is None else f"{share:.2f}"
            checks.append((f"{tag}: hookbus overhead / native overhead {shown} <= 0.25",
                           share is not None and share <= 0.25))
        else:
            ours, theirs = rows["hookbus"][stat], rows["native"][stat]
            checks.append((f"{tag}: hookbus {ours:.3f} <= native {theirs:.3f} x bare", ours <= theirs))
    return checks


def print_table(result: dict[str, Any]) -> None:
    print(f"TF {result['tensorflow']}, Python {result['python']}, {result['machine']}, "
          f"{result['rounds']} rounds x {result['chunk']} steps")
    header = (f"{'model':<7} {'cadence':<10} {'config':<14} {'min µs/step':>11} {'median µs/step':>14} "
              f"{'x bare min':>10} {'x bare med':>10} {'x bare paired':>13}")
    print(header)
    print("-" * len(header))
    for group in result["groups"]:
        for name, row in group["rows"].items():
            print(f"{group['model']:<7} {group['cadence']:<10} {name:<14} {row['min_us']:>11.1f} "
                  f"{row['median_us']:>14.1f} {row['ratio_min']:>10.3f} {row['ratio_median']:>10.3f} "
                  f"{row['ratio_paired']:>13.3f}")
        share_of = group["hookbus_share_of_native_overhead"]
        shares = ", ".join(f"{stat} {'n/a' if v is None else f'{v:.2f}'}" for stat, v in share_of.items())
        print(f"{'':<33}hookbus overhead / native overhead: {shares}")
    print("targets:")
    for text, ok in result["targets"]:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", choices=["linear", "mlp", "all"], default="all")
    parser.add_argument("--cadence", choices=[*sorted(CADENCES), "all"], default="all")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--chunk", type=int, default=1000, help="steps per configuration per round")
    parser.add_argument("--warmup", type=int, default=300, help="steps per configuration before timing")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds of 20 steps")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.chunk, args.warmup = 2, 20, 5
    v1.disable_eager_execution()
    np.set_printoptions(suppress=True)
    models = ["linear", "mlp"] if args.model == "all" else [args.model]
    cadences = ["realistic", "every"] if args.cadence == "all" else [args.cadence]
    groups = [measure(m, c, args.rounds, args.chunk, args.warmup) for m in models for c in cadences]
    result: dict[str, Any] = {
        "benchmark": "overhead",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "rounds": args.rounds,
        "chunk": args.chunk,
        "warmup": args.warmup,
        "groups": groups,
    }
    result["targets"] = [check for g in groups for check in check_targets(g)]
    print_table(result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
