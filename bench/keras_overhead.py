"""Per-step cost of hookbus behind Keras ``model.fit``, side by side with Keras's own callbacks.

Configurations, each with its own copy of a small classifier (the same architecture and data):
    none     ``fit(verbose=0)`` without callbacks.
    keras    Keras's own set: TensorBoard (scalars every 100 batches, no graph), CSVLogger,
             EarlyStopping (on ``loss``), ModelCheckpoint (a ``.keras`` file, model and optimizer,
             every epoch) and ProgbarLogger (``verbose=1``; stdout goes to /dev/null, so it
             prints what it prints on a non-terminal).
    hookbus  one ``hookbus.EventBusCallback`` with the equivalent sinks: TensorBoardSink every 100
             steps, CSVSink(epochs=True) (CSVLogger's rows), EarlyStoppingSink on ``loss`` once per
             epoch, CheckpointSink once per epoch (``tf.train.Checkpoint``: model and optimizer)
             and ConsoleSink in plain mode to /dev/null (its defaults off a terminal).

Each round runs one ``fit`` of ``--epochs`` epochs in every configuration in turn (interleaved,
the order rotated each round); one warm-up fit per configuration traces the train function
first. Reported: min and median microseconds per training step over the rounds, and ratios
against ``none``. Both ``steps_per_execution`` 1 and 32. Target (issue 6): hookbus no slower than
Keras's own set.

    python bench/keras_overhead.py [--rounds 10] [--epochs 2] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
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
    net = keras.Sequential([
        keras.Input(shape=(20,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(2),
    ])  # fmt: skip
    net.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return net


@dataclass
class Config:
    """One configuration: its model, its callbacks and its per-round microseconds per step."""

    name: str
    net: Any
    callbacks: list[Any]
    verbose: int
    times: list[float] = field(default_factory=list)


def keras_callbacks(directory: str) -> list[Any]:
    """Keras's own callbacks doing the same work."""
    return [
        keras.callbacks.TensorBoard(os.path.join(directory, "tb"), update_freq=TB_EVERY, write_graph=False),
        keras.callbacks.CSVLogger(os.path.join(directory, "epochs.csv"), append=True),
        keras.callbacks.EarlyStopping(monitor="loss", patience=PATIENCE),
        keras.callbacks.ModelCheckpoint(os.path.join(directory, "model.keras")),
        keras.callbacks.ProgbarLogger(),
    ]


def hookbus_callback(directory: str, steps: int, sink_file: Any, stack: contextlib.ExitStack) -> list[Any]:
    """The EventBusCallback and its sinks; ``steps`` per epoch."""
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(Console(file=sink_file, force_terminal=False, width=120), live=False))
    bus.attach(TensorBoardSink(os.path.join(directory, "tb"), every_n_steps=TB_EVERY))
    bus.attach(CSVSink(os.path.join(directory, "epochs.csv"), epochs=True))
    bus.attach(EarlyStoppingSink(monitor="loss", patience=PATIENCE, every_n_steps=steps))
    bus.attach(CheckpointSink(os.path.join(directory, "ckpt"), every_n_steps=steps, every_n_secs=None))
    stack.enter_context(bus)  # one run for every fit of this configuration
    return [hookbus.EventBusCallback(bus, keys=["loss", "accuracy"])]


def make(name: str, steps_per_execution: int, steps: int, stack: contextlib.ExitStack, sink_file: Any) -> Config:
    directory = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-keras-{name}-"))
    if name == "keras":
        # verbose=1 as well: fit adds its own ProgbarLogger otherwise (and none at verbose=0).
        return Config(name, model(steps_per_execution), keras_callbacks(directory), verbose=1)
    callbacks = hookbus_callback(directory, steps, sink_file, stack) if name == "hookbus" else []
    return Config(name, model(steps_per_execution), callbacks, verbose=0)


def fit(config: Config, x: Any, y: Any, epochs: int) -> float:
    """Microseconds per training step of one ``fit``."""
    start = time.perf_counter()
    config.net.fit(x, y, batch_size=BATCH, epochs=epochs, callbacks=config.callbacks, verbose=config.verbose,
                   shuffle=False)  # fmt: skip
    return (time.perf_counter() - start) / (epochs * len(x) // BATCH) * 1e6


def measure(steps_per_execution: int, rounds: int, epochs: int, steps: int, warmup: bool = True) -> dict[str, Any]:
    x, y = data(steps)
    with contextlib.ExitStack() as stack:
        sink_file = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack
        stack.enter_context(contextlib.redirect_stdout(sink_file))  # the progress bar's stdout
        configs = [make(name, steps_per_execution, steps, stack, sink_file) for name in CONFIGS]
        for config in configs if warmup else ():
            fit(config, x, y, 1)  # traces the train function
        for r in range(rounds):
            shift = r % len(configs)
            for config in configs[shift:] + configs[:shift]:
                config.times.append(fit(config, x, y, epochs))
    base = configs[0].times
    rows = {
        c.name: {
            "min_us": min(c.times),
            "median_us": statistics.median(c.times),
            "ratio_min": min(c.times) / min(base),
            "ratio_median": statistics.median(c.times) / statistics.median(base),
            "ratio_paired": statistics.median(t / b for t, b in zip(c.times, base, strict=True)),
        }
        for c in configs
    }
    return {"steps_per_execution": steps_per_execution, "rows": rows}


def print_table(result: dict[str, Any]) -> None:
    print(f"Keras {result['keras']}, TF {result['tensorflow']}, Python {result['python']}, {result['machine']}; "
          f"{result['rounds']} rounds x {result['epochs']} epochs x {result['steps_per_epoch']} steps")
    header = (f"{'steps/exec':>10} {'config':<8} {'min µs/step':>11} {'median µs/step':>14} "
              f"{'x none min':>10} {'x none med':>10} {'x none paired':>13}")
    print(header)
    print("-" * len(header))
    for group in result["groups"]:
        for name, row in group["rows"].items():
            print(f"{group['steps_per_execution']:>10} {name:<8} {row['min_us']:>11.1f} {row['median_us']:>14.1f} "
                  f"{row['ratio_min']:>10.3f} {row['ratio_median']:>10.3f} {row['ratio_paired']:>13.3f}")
    print("targets:")
    for text, ok in result["targets"]:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=2, help="epochs per fit")
    parser.add_argument("--steps-per-epoch", type=int, default=STEPS_PER_EPOCH)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 1 short epoch, no warm-up")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.epochs, args.steps_per_epoch = 1, 1, 32
    groups = [measure(spe, args.rounds, args.epochs, args.steps_per_epoch, not args.quick) for spe in (1, 32)]
    targets = []
    for group in groups:
        rows = group["rows"]
        for stat in ("ratio_min", "ratio_paired"):
            ours, theirs = rows["hookbus"][stat], rows["keras"][stat]
            targets.append((f"steps_per_execution={group['steps_per_execution']} [{stat}]: hookbus {ours:.3f} "
                            f"<= keras {theirs:.3f} x none", ours <= theirs))
    result: dict[str, Any] = {
        "benchmark": "keras_overhead",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "rounds": args.rounds,
        "epochs": args.epochs,
        "steps_per_epoch": args.steps_per_epoch,
        "groups": groups,
        "targets": targets,
    }
    print_table(result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
