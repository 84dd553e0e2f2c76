"""Per-step cost of hookbus behind Keras ``model.fit``, side by side with Keras's own callbacks.

Configurations, each with its own copy of a small classifier (the same architecture and data):
    none     ``fit(verbose=0)`` without callbacks.
    keras    Keras's own set: TensorBoard (batch scalars and steps per second every 100 steps, no
             graph), CSVLogger, EarlyStopping (on ``loss``), ModelCheckpoint (``save_weights_only``: a
             ``.weights.h5`` file of the model's and the optimizer's variables, every epoch: what the
             sink's checkpoint holds) and ProgbarLogger (``verbose=1``; stdout goes to /dev/null, so
             it prints what it prints on a non-terminal).
    hookbus  one ``hookbus.EventBusCallback`` with the equivalent sinks: TensorBoardSink every 100
             steps, CSVSink(epochs=True) (CSVLogger's rows), EarlyStoppingSink on ``loss`` once per
             epoch, CheckpointSink once per epoch (``tf.train.Checkpoint``: model and optimizer)
             and ConsoleSink in plain mode to /dev/null (its defaults off a terminal).

Both sides write the same TensorBoard rows: Keras's ``update_freq`` counts batch callbacks, which
at ``steps_per_execution > 1`` are executions (``TensorBoard._global_train_batch`` counts calls
and starts again at every ``fit``), so ``update_freq=100`` at 32 steps per execution would write
no batch row in a 512-step ``fit`` while TensorBoardSink writes 5; Keras gets
``round(100 / steps_per_execution)`` executions instead (every 96 steps at 32: 5 rows a ``fit``)
and ``write_steps_per_second=True`` (the sink's ``steps/sec``): 3 scalars a row on both sides;
every run counts the batch scalars each side wrote (``tensorboard_rows``, per 1000 steps).

All open at once in one process, each round runs one ``fit`` of ``--epochs`` epochs in every
configuration in turn, the order rotated each round (``bench/_interleave.py``; the method and the
table are described in ``bench/README.md``); one warm-up fit per configuration traces the train
function first. Reported against ``none``: the ratio of total time over the rounds and of the
median round, wall and CPU time; with ``--runs N`` (default 3) each run is its own process and
every figure is the median of the runs with their [min–max]. Both ``steps_per_execution`` 1 and
32. Targets: hookbus no slower than Keras's own set (issue 6); at 32 steps per execution,
hookbus's overhead at most a quarter of Keras's set's (issue 30).

    python bench/keras_overhead.py [--runs 3] [--rounds 10] [--epochs 2] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import json
import os
import platform
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _interleave import cell, interleave, runs_of, share, spread, summarize  # noqa: E402
from rich.console import Console  # noqa: E402

import hookbus  # noqa: E402
from hookbus.sinks import CheckpointSink, ConsoleSink, CSVSink, EarlyStoppingSink, TensorBoardSink  # noqa: E402

keras = tf.keras
BATCH = 32
STEPS_PER_EPOCH = 256  # a multiple of 32: steps_per_execution=32 runs whole executions
TB_EVERY = 100
PATIENCE = 10**6  # early stopping decides every epoch and never stops a benchmark
CONFIGS = ("none", "keras", "hookbus")


def data(steps: int = STEPS_PER_EPOCH) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A two-class problem generated here (no download)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * BATCH, 20)).astype("float32")
    y = (x[:, :5].sum(axis=1) > 0).astype("int32")
    return x, y


def model(steps_per_execution: int) -> Any:
    """A small MLP classifier, compiled."""
    net = keras.Sequential(
        [
            keras.Input(shape=(20,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(2),
        ]
    )
    net.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return net


@dataclass
class Config:
    """One configuration: its model and its callbacks."""

    name: str
    net: Any
    callbacks: list[Any]
    directory: str
    verbose: int


def keras_update_freq(steps_per_execution: int) -> int:
    """TensorBoard's ``update_freq`` that writes a row about every ``TB_EVERY`` steps: it counts
    batch callbacks, one per execution of ``steps_per_execution`` steps."""
    return max(1, round(TB_EVERY / steps_per_execution))


def keras_callbacks(directory: str, steps_per_execution: int) -> list[Any]:
    """Keras's own callbacks doing the same work."""
    freq = keras_update_freq(steps_per_execution)
    return [
        # steps per second as well: TensorBoardSink writes steps/sec beside the values
        keras.callbacks.TensorBoard(
            os.path.join(directory, "tb"), update_freq=freq, write_graph=False, write_steps_per_second=True
        ),
        keras.callbacks.CSVLogger(os.path.join(directory, "epochs.csv"), append=True),
        keras.callbacks.EarlyStopping(monitor="loss", patience=PATIENCE),
        # The variables only, as the sink's tf.train.Checkpoint (a .keras file adds the configuration
        # and a zip: ~2.8 ms more a save here)
        keras.callbacks.ModelCheckpoint(os.path.join(directory, "model.weights.h5"), save_weights_only=True),
        keras.callbacks.ProgbarLogger(),
    ]


def hookbus_callback(directory: str, steps: int, sink_file: Any, stack: contextlib.ExitStack) -> list[Any]:
    """The EventBusCallback and its sinks; ``steps`` per epoch."""
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(Console(file=sink_file, force_terminal=False, width=120), live=False))
    # throughput=False: steps/sec alone beside the values, the scalars Keras's TensorBoard writes
    bus.attach(TensorBoardSink(os.path.join(directory, "tb"), every_n_steps=TB_EVERY, throughput=False))
    bus.attach(CSVSink(os.path.join(directory, "epochs.csv"), epochs=True))
    bus.attach(EarlyStoppingSink(monitor="loss", patience=PATIENCE, every_n_steps=steps))
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt"), every_n_steps=steps, every_n_secs=None))
    stack.enter_context(bus)  # one run for every fit of this configuration
    return [hookbus.EventBusCallback(bus, keys=["loss", "accuracy"])]


def make(name: str, steps_per_execution: int, steps: int, stack: contextlib.ExitStack, sink_file: Any) -> Config:
    directory = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-keras-{name}-"))
    if name == "keras":
        # verbose=1 as well: fit adds its own ProgbarLogger otherwise (and none at verbose=0).
        return Config(
            name, model(steps_per_execution), keras_callbacks(directory, steps_per_execution), directory, verbose=1
        )
    callbacks = hookbus_callback(directory, steps, sink_file, stack) if name == "hookbus" else []
    return Config(name, model(steps_per_execution), callbacks, directory, verbose=0)


def tensorboard_rows(config: Config) -> float:
    """Batch scalars (values written at a step, not Keras's ``epoch_*``) in ``config``'s
    TensorBoard files so far, per 1000 trained steps."""
    rows = 0
    for path in glob.glob(os.path.join(config.directory, "tb", "**", "events.out.tfevents.*"), recursive=True):
        for event in tf.compat.v1.train.summary_iterator(path):
            rows += sum(
                1
                for value in event.summary.value
                if not value.tag.startswith("epoch_")
                and (value.HasField("simple_value") or value.metadata.plugin_data.plugin_name == "scalars")
            )
    return 1000 * rows / max(1, int(config.net.optimizer.iterations.numpy()))


def fit(config: Config, x: Any, y: Any, epochs: int) -> int:
    """One ``fit`` of ``epochs`` epochs; returns the training steps it ran."""
    config.net.fit(
        x, y, batch_size=BATCH, epochs=epochs, callbacks=config.callbacks, verbose=config.verbose, shuffle=False
    )
    return epochs * len(x) // BATCH


def measure(steps_per_execution: int, rounds: int, epochs: int, steps: int, warmup: bool = True) -> dict[str, Any]:
    """One run: interleaved rounds of one ``fit`` per configuration (raw series)."""
    x, y = data(steps)
    with contextlib.ExitStack() as stack:
        sink_file = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack
        stack.enter_context(contextlib.redirect_stdout(sink_file))  # the progress bar's stdout
        configs = {name: make(name, steps_per_execution, steps, stack, sink_file) for name in CONFIGS}
        for config in configs.values() if warmup else ():
            fit(config, x, y, 1)  # traces the train function
        series = interleave(list(configs), lambda name: fit(configs[name], x, y, epochs), rounds)
        rows = {name: tensorboard_rows(configs[name]) for name in ("keras", "hookbus")}  # both flushed at train end
    return {"steps_per_execution": steps_per_execution, "series": series, "tensorboard_rows": rows}


def figures(raw_groups: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``steps_per_execution`` across runs: every configuration against ``none``."""
    runs = [summarize(g["series"], "none") for g in raw_groups]
    shares = [{"share": {k: share(run, k, "keras") for k in ("x_wall", "x_cpu")}} for run in runs]
    return {
        "steps_per_execution": raw_groups[0]["steps_per_execution"],
        "rows": spread(runs),
        "hookbus_share_of_keras_overhead": spread(shares)["share"],
        "tensorboard_rows": {name: [g["tensorboard_rows"][name] for g in raw_groups] for name in ("keras", "hookbus")},
    }


def check_targets(group: dict[str, Any]) -> list[tuple[str, bool]]:
    """Issue 6, and issue 30 at 32 steps per execution: on the median of the runs of the ratio of
    totals, met when met in wall and in CPU time (as in ``bench/overhead.py``)."""
    rows, spe = group["rows"], group["steps_per_execution"]

    def median(row: dict[str, Any], key: str) -> float:
        return float(row[key]["median"])

    ours = [median(rows["hookbus"], key) for key in ("x_wall", "x_cpu")]
    theirs = [median(rows["keras"], key) for key in ("x_wall", "x_cpu")]
    checks = [
        (
            f"steps_per_execution={spe}: hookbus x none <= keras x none (issue 6): wall {ours[0]:.3f} <= "
            f"{theirs[0]:.3f}, CPU {ours[1]:.3f} <= {theirs[1]:.3f}",
            ours[0] <= theirs[0] and ours[1] <= theirs[1],
        )
    ]
    if spe == 32:
        share = [median(group["hookbus_share_of_keras_overhead"], key) for key in ("x_wall", "x_cpu")]
        checks.append(
            (
                f"steps_per_execution={spe}: hookbus overhead / keras overhead (issue 30): wall "
                f"{share[0]:.2f} / CPU {share[1]:.2f} <= 0.25",
                all(x <= 0.25 for x in share),
            )
        )
    return checks


COLUMNS = (
    ("x_wall", "x none wall"),
    ("x_wall_median", "x none wall med"),
    ("x_cpu", "x none CPU"),
    ("x_cpu_median", "x none CPU med"),
)


def print_table(result: dict[str, Any]) -> None:
    runs = result["runs"]
    print(
        f"Keras {result['keras']}, TF {result['tensorflow']}, Python {result['python']}, {result['machine']}; "
        f"{runs} run(s) x {result['rounds']} rounds x {result['epochs']} epochs x {result['steps_per_epoch']} "
        f"steps; load {result['load']}"
    )
    print("each figure: median of the runs [min–max]; x: ratio of totals over the rounds, 'med': of the median round")
    width = 20 if runs > 1 else 9
    header = f"{'steps/exec':>10} {'config':<8} {'µs/step':>8} {'CPU µs':>8} " + " ".join(
        f"{title:>{width}}" for _, title in COLUMNS
    )
    print(header)
    print("-" * len(header))
    for group in result["groups"]:
        for name, row in group["rows"].items():
            print(
                f"{group['steps_per_execution']:>10} {name:<8} {row['wall_us']['median']:>8.1f} "
                f"{row['cpu_us']['median']:>8.1f} " + " ".join(f"{cell(row[key]):>{width}}" for key, _ in COLUMNS)
            )
        share = group["hookbus_share_of_keras_overhead"]
        print(
            f"{'':<20}hookbus overhead / keras overhead: wall {cell(share['x_wall'], 2)}, CPU {cell(share['x_cpu'], 2)}"
        )
        rows = {name: ", ".join(f"{r:.1f}" for r in runs) for name, runs in group["tensorboard_rows"].items()}
        print(
            f"{'':<20}TensorBoard batch scalars per 1000 steps (each run): keras {rows['keras']}; "
            f"hookbus {rows['hookbus']}"
        )
    print("targets (median of the runs, ratio of totals; met when met in wall and in CPU time):")
    for text, ok in result["targets"]:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="separate processes, for the spread between runs")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=2, help="epochs per fit")
    parser.add_argument("--steps-per-epoch", type=int, default=STEPS_PER_EPOCH)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 runs of 1 round of 1 short epoch")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    parser.add_argument("--raw", default=None, metavar="PATH", help=argparse.SUPPRESS)  # one run, for --runs
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.epochs, args.steps_per_epoch = 1, 1, 128  # a TensorBoard row on each side
        args.runs = min(args.runs, 2)

    def measure_here() -> list[dict[str, Any]]:
        return [measure(spe, args.rounds, args.epochs, args.steps_per_epoch, not args.quick) for spe in (1, 32)]

    runs = runs_of(os.path.abspath(__file__), argv, args.runs, args.raw, measure_here)
    if args.raw:
        return runs[0]  # one of several runs: its result is in args.raw
    groups = [figures([run["groups"][i] for run in runs]) for i in range(len(runs[0]["groups"]))]
    result: dict[str, Any] = {
        "benchmark": "keras_overhead",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "runs": len(runs),
        "rounds": args.rounds,
        "epochs": args.epochs,
        "steps_per_epoch": args.steps_per_epoch,
        "groups": groups,
        "targets": [check for g in groups for check in check_targets(g)],
        "raw": runs,
    }
    print_table(result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
