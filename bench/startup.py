"""Issue 39 item 3: start-up with a large model, from process start to the first step.

Each start is a child process (a fresh interpreter: TensorFlow's import, the graph or the
model, the restore of a checkpoint of ``--mb`` MB, one training step), timed from just before the
parent starts it to the moment the child's first step returned (both read ``time.time()``). One
checkpoint is made first, by hookbus (so it has the sinks' state files and the pointer), and every
start restores that same checkpoint. Configurations, for each API:

- ``tf1``: a ``tf.compat.v1`` graph of ``--variables`` float32 variables holding ``--mb`` MB.
  ``native``: TensorFlow's own restore (``MonitoredTrainingSession(checkpoint_dir=...)`` with
  its step-counter, summary and checkpoint hooks off). ``hookbus``: ``monitored_training_session``
  with an ``EventBusHook`` and a ``CheckpointSink`` on the directory, whose start checks the latest
  checkpoint's index before TensorFlow restores it. ``hookbus-full-read``: the same, with the check
  of before issue 39 (every tensor read back: ``read_problem``), for the before/after figure.
- ``tf2``: the same variables in a ``tf.Module``. ``native``: ``tf.train.Checkpoint.read`` of the
  latest checkpoint, then a step. ``hookbus``: a ``LoopPublisher(restore=True)`` with a
  ``CheckpointSink``; ``hookbus-full-read`` as above.

Rounds are interleaved (every configuration once per round, the order rotated each round), so
machine noise falls on all alike. Each figure is the median of the rounds [min–max]; the ratio
against ``native`` is taken per round (a start and the native start of the same round), then its
median [min–max]: of the wall time to the first step (the target's figure), of the child's CPU time
to it (less moved by other processes on a shared machine), and of the part after the imports
(``restored`` − ``imported``: the model, the restore, hookbus's start), where the check differs.
The checkpoint's files stay in the page cache between starts (23 GB of RAM here): what is measured
is reading them from memory, checksums and copies, not the disk.

Usage: ``.venv/bin/python bench/startup.py [--mb 1024] [--rounds 3] [--api tf1|tf2|all] [--json PATH]``;
``--quick``: 8 MB, 2 rounds, ``tf1`` unless ``--api`` is given (``tests/test_bench.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("native", "hookbus", "hookbus-full-read")
APIS = ("tf1", "tf2")
TARGET = 1.10  # hookbus's start-up / TensorFlow's own, median of the rounds
PHASES = ("imported", "ready", "first_step")  # seconds since the parent started the child, each
FIGURES = (*PHASES, "cpu_s")  # and the child's CPU seconds to its first step
NEVER = 10**9  # a measured start's CheckpointSink checks the directory and restores, and never saves


# -- the child: one start ---------------------------------------------------------------------
def _shapes(mb: int, variables: int) -> list[tuple[int, int]]:
    """``variables`` float32 matrices of 1024 columns holding ``mb`` MB together."""
    rows = max(1, mb * 2**20 // 4 // 1024 // variables)
    return [(rows, 1024)] * variables


def _full_read() -> None:
    """Put back the check of before issue 39: read every tensor of the latest checkpoint back."""
    from hookbus._checkpoints._store import FileCheckpointStore
    from hookbus._tf import _checkpoint_tf1

    _checkpoint_tf1.TensorFlowStore.problem = lambda self, prefix: (  # type: ignore[method-assign]
        FileCheckpointStore.problem(self, prefix) or _checkpoint_tf1.read_problem(prefix)
    )


def _tf1_child(config: str, directory: str, shapes: list[tuple[int, int]], mark: Callable[[str], None]) -> None:
    import tensorflow as tf

    import hookbus
    from hookbus.sinks import CheckpointSink, StopAtStepSink

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    mark("imported")
    step = v1.train.get_or_create_global_step()
    weights = [
        v1.get_variable(f"w{i}", shape, initializer=v1.random_uniform_initializer()) for i, shape in enumerate(shapes)
    ]
    loss = tf.add_n([tf.reduce_sum(w[0, :8]) for w in weights])
    train_op = tf.group(step.assign_add(1), *[w[0, :8].assign(w[0, :8] * 0.5) for w in weights])
    if config == "make" or config.startswith("hookbus"):
        bus = hookbus.EventBus()
        bus.attach(CheckpointSink(directory, every_n_steps=1 if config == "make" else NEVER, keep=2))
        if config == "make":
            bus.attach(StopAtStepSink(last_step=1))
        hook = hookbus.EventBusHook(bus, {"loss": loss}, train_op=train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=directory) as session:
            mark("ready")
            session.run(train_op)
            mark("first_step")
            if config == "make":
                while not session.should_stop():
                    session.run(train_op)
            else:
                os._exit(0)  # the first step was what is measured: no save of the model at the end
        return
    with v1.train.MonitoredTrainingSession(
        checkpoint_dir=directory,
        save_checkpoint_secs=None,
        save_checkpoint_steps=None,
        save_summaries_steps=None,
        save_summaries_secs=None,
        log_step_count_steps=None,
    ) as session:
        mark("ready")
        session.run(train_op)
        mark("first_step")
        os._exit(0)  # as hookbus's start: what comes after the first step is not measured


def _tf2_child(config: str, directory: str, shapes: list[tuple[int, int]], mark: Callable[[str], None]) -> None:
    import tensorflow as tf

    import hookbus
    from hookbus.sinks import CheckpointSink

    mark("imported")
    module = tf.Module()
    module.step = tf.Variable(0, dtype=tf.int64)
    # Random values for the checkpoint; zeros (cheap to make) where a restore replaces them.
    initial = tf.random.uniform if config == "make" else tf.zeros
    module.weights = [tf.Variable(initial(shape)) for shape in shapes]
    checkpoint = tf.train.Checkpoint(model=module)

    @tf.function
    def train_step() -> Any:
        module.step.assign_add(1)
        for w in module.weights:
            w[0, :8].assign(w[0, :8] * 0.5)
        return tf.add_n([tf.reduce_sum(w[0, :8]) for w in module.weights])

    if config == "native":
        checkpoint.read(tf.train.latest_checkpoint(directory)).assert_existing_objects_matched()
        mark("ready")
        float(train_step())
        mark("first_step")
        os._exit(0)
    bus = hookbus.EventBus()
    bus.attach(CheckpointSink(directory, every_n_steps=1 if config == "make" else NEVER, keep=2))
    loop = hookbus.LoopPublisher(
        bus, keys=["loss"], step_counter=module.step, checkpoint=checkpoint, restore=config != "make"
    )
    with bus, loop:
        mark("ready")
        loop.step({"loss": train_step()})
        mark("first_step")
        if config != "make":
            os._exit(0)  # the first step was what is measured: no save of the model at the end


def child(api: str, config: str, directory: str, mb: int, variables: int, started: float, out: str) -> None:
    marks: dict[str, float] = {}

    def mark(phase: str) -> None:
        marks[phase] = time.time() - started
        if phase == "first_step":
            marks["cpu_s"] = time.process_time()  # the child's CPU time, every thread, to the first step
            with open(out, "w") as fh:
                json.dump(marks, fh)

    if config == "hookbus-full-read":
        _full_read()
    (_tf1_child if api == "tf1" else _tf2_child)(config, directory, _shapes(mb, variables), mark)


# -- the parent: rounds of starts ---------------------------------------------------------------
def start(api: str, config: str, directory: str, args: argparse.Namespace) -> dict[str, float]:
    """Start one child; its phases, in seconds from just before it was started."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = fh.name
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    started = time.time()
    command = [sys.executable, __file__, "--child", api, config, directory, str(args.mb), str(args.variables)]
    done = subprocess.run([*command, repr(started), out], env=env, capture_output=True, text=True, check=False)
    try:
        if done.returncode != 0:
            raise RuntimeError(f"{api} {config} start failed ({done.returncode}):\n{done.stderr[-3000:]}")
        with open(out) as fh:
            return dict(json.load(fh))
    finally:
        os.remove(out)


def spread(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def cell(figure: dict[str, Any], digits: int = 2) -> str:
    return f"{figure['median']:.{digits}f} [{figure['min']:.{digits}f}–{figure['max']:.{digits}f}]"


def measure(api: str, args: argparse.Namespace) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix=f"hookbus-startup-{api}-")
    try:
        start(api, "make", directory, args)
        sizes = sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if ".data-" in n)
        rounds: list[dict[str, dict[str, float]]] = []
        for r in range(args.rounds):
            order = CONFIGS[r % len(CONFIGS) :] + CONFIGS[: r % len(CONFIGS)]
            rounds.append({config: start(api, config, directory, args) for config in order})
            print(
                f"{api} round {r + 1}/{args.rounds}: "
                + ", ".join(f"{c} {rounds[-1][c]['first_step']:.2f} s" for c in CONFIGS),
                file=sys.stderr,
                flush=True,
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    rows = {c: {p: spread([run[c][p] for run in rounds]) for p in FIGURES} for c in CONFIGS}

    def ratios(figure: Callable[[dict[str, float]], float]) -> dict[str, dict[str, Any]]:
        return {c: spread([figure(run[c]) / figure(run["native"]) for run in rounds]) for c in CONFIGS[1:]}

    return {
        "api": api,
        "data_bytes": sizes,
        "rows": rows,
        "x_native": ratios(lambda start: start["first_step"]),
        "x_native_cpu": ratios(lambda start: start["cpu_s"]),
        # What the model, the restore (and hookbus's start) cost beyond the same process's imports.
        "restore_s": {c: spread([run[c]["ready"] - run[c]["imported"] for run in rounds]) for c in CONFIGS},
        "x_native_restore": ratios(lambda start: start["ready"] - start["imported"]),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        api, config, directory, mb, variables, started, out = argv[1:]
        child(api, config, directory, int(mb), int(variables), float(started), out)
        return {}
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="the checkpoint's size in MB (default 1024)")
    parser.add_argument("--variables", type=int, default=4, help="how many variables hold it (default 4)")
    parser.add_argument("--rounds", type=int, default=3, help="starts of each configuration (default 3)")
    parser.add_argument("--api", choices=[*APIS, "all"], default="all")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 8 MB, 2 rounds, tf1 unless --api")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:  # every start imports TensorFlow (5-15 s on 2 shared CPUs): the fewest that show a spread
        args.mb, args.rounds = 8, 2
        args.api = "tf1" if "--api" not in argv else args.api
    import tensorflow as tf

    groups = [measure(api, args) for api in (APIS if args.api == "all" else (args.api,))]
    targets = []
    for g in groups:
        got = g["x_native"]["hookbus"]
        cpu = cell(g["x_native_cpu"]["hookbus"], 3)
        text = (
            f"{g['api']}: hookbus start-up <= {TARGET:.2f} x TensorFlow's own restore (wall {cell(got, 3)}; CPU {cpu})"
        )
        targets.append((text, got["median"] <= TARGET))
    result: dict[str, Any] = {
        "benchmark": "startup",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "mb": args.mb,
        "variables": args.variables,
        "rounds": args.rounds,
        "groups": groups,
        "targets": targets,
    }
    print_table(result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


def print_table(result: dict[str, Any]) -> None:
    print(
        f"TF {result['tensorflow']}, Python {result['python']}, {result['machine']}; {result['rounds']} "
        f"interleaved round(s); load {result['load']}"
    )
    print(
        "seconds from process start (wall) and the child's CPU seconds; each figure: median of the rounds "
        "[min–max]; x: the per-round ratio to native's start of the same round"
    )
    header = (
        f"{'api':<4} {'config':<18} {'MB':>5} {'imported':>18} {'restored':>18} {'first step':>18} "
        f"{'CPU s':>18} {'x native wall':>20} {'x native CPU':>20} {'x restore wall':>20}"
    )
    print(header)
    print("-" * len(header))
    for g in result["groups"]:
        for config, row in g["rows"].items():
            ratios = [
                cell(g[key][config], 3) if config in g[key] else ""
                for key in ("x_native", "x_native_cpu", "x_native_restore")
            ]
            print(
                f"{g['api']:<4} {config:<18} {g['data_bytes'] / 2**20:>5.0f} {cell(row['imported']):>18} "
                f"{cell(row['ready']):>18} {cell(row['first_step']):>18} {cell(row['cpu_s']):>18} "
                + " ".join(f"{r:>20}" for r in ratios)
            )
    print("targets (median of the rounds of the per-round wall ratio, process start to first step):")
    for text, ok in result["targets"]:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")


if __name__ == "__main__":
    main()
