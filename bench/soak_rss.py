"""Resident memory over a long TF1 run: what grows, sink by sink, against a bare training loop.

Each configuration trains the demo's linear regression (``build_linear_regression``) in
``hookbus.monitored_training_session`` in a process of its own (memory is per process) and samples,
every ``--every`` steps: RSS (``/proc/self/status`` ``VmRSS``, split into ``RssAnon`` and
``RssFile``, and ``statm``'s resident pages), the peak (``VmHWM``), the threads, glibc's heap
(``mallinfo2``: bytes in use and free bytes the arenas hold; the number of arenas from
``malloc_info``) and the Python objects the collector tracks. ``--trim`` also calls
``malloc_trim(0)`` after the last sample and records RSS after it: the part of the growth that is free
memory glibc had not returned to the OS. ``--arena-max N`` runs the children with
``MALLOC_ARENA_MAX=N``.

Configurations:

- ``bare``: ``StopAtStepHook`` only.
- ``fetch``: no hookbus: a plain ``SessionRunHook`` that fetches loss and accuracy every 10 steps
  (the floor of any hook that brings values out; ``FetchFloor`` in ``bench/_tf1_hooks.py``).
- ``saver``: no hookbus: TensorFlow's ``CheckpointSaverHook`` every 1000 steps (``Saver.save``,
  5 kept): what ``checkpoint`` does, by TensorFlow alone.
- ``bus``: one ``EventBusHook`` (loss, accuracy) with a no-op function due every 10 steps.
- ``all``: every sink at the realistic cadence (``bench/README.md``): ConsoleSink (plain, to
  /dev/null, 4/s), CSVSink and NanGuardSink every 10 steps, TensorBoardSink and EarlyStoppingSink
  every 100, CheckpointSink every 1000 (keep 5), EventLogSink (passive: every event published),
  StopAtStepSink at the last step.
- ``defaults``: the same sinks on their default schedules (NanGuardSink and EarlyStoppingSink every
  step, so EventLogSink records every step; CSVSink every 10, TensorBoardSink every 100,
  ConsoleSink 4/s), CheckpointSink every 5000 steps (its default, every 600 s, would save once
  or twice here).
- ``console``, ``csv``, ``nan``, ``tensorboard``, ``early``, ``checkpoint``, ``event_log``: one sink
  alone at that cadence (``event_log`` with the no-op function every 10 steps, which it records).

    python bench/soak_rss.py [--configs bare,bus,all] [--steps 400000] [--every 50000] [--trim]
                             [--arena-max N] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import gc
import importlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SINGLE = ("console", "csv", "nan", "tensorboard", "early", "checkpoint", "event_log")  # one sink alone
CONFIGS = ("bare", "fetch", "saver", "bus", "all", "defaults", *SINGLE)
NEVER = 10**9


def proc_status() -> dict[str, int]:
    """``VmRSS``, ``RssAnon``, ``RssFile``, ``VmHWM`` (bytes) and ``Threads`` from /proc/self/status."""
    wanted = {"VmRSS", "RssAnon", "RssFile", "VmHWM", "Threads"}
    found: dict[str, int] = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in wanted:
                number = int(value.split()[0])
                found[name] = number if name == "Threads" else number * 1024
    with open("/proc/self/statm") as statm:
        found["statm_resident"] = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return found


def thread_names() -> list[str]:
    """The names of this process's threads (``/proc/self/task/*/comm``: TensorFlow's pools, the writers)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/comm") as comm:
            names.append(comm.read().strip())
    return names


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


class Glibc:
    """glibc's heap figures, where the C library is glibc (else every figure is absent)."""

    def __init__(self) -> None:
        try:
            self.libc: Any = ctypes.CDLL("libc.so.6")
            self.libc.mallinfo2.restype = _MallInfo2
            self.libc.fopen.restype = ctypes.c_void_p
            self.libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            self.libc.fclose.argtypes = [ctypes.c_void_p]
            self.libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        except (OSError, AttributeError):
            self.libc = None

    def figures(self, scratch: str) -> dict[str, int]:
        if self.libc is None:
            return {}
        info = self.libc.mallinfo2()
        found = {
            "heap_in_use": info.uordblks + info.hblkhd,  # allocated chunks, mmapped ones included
            "heap_free": info.fordblks,  # free chunks the arenas keep (resident or not)
            "heap_arena_bytes": info.arena,  # bytes the arenas took from the OS with brk/mmap
        }
        handle = self.libc.fopen(scratch.encode(), b"w")
        if handle:
            self.libc.malloc_info(0, handle)
            self.libc.fclose(handle)
            with open(scratch) as xml:
                found["arenas"] = len(re.findall(r"<heap nr=", xml.read()))
        return found

    def trim(self) -> None:
        if self.libc is not None:
            self.libc.malloc_trim(0)


def build_config(name: str, directory: str, steps: int, sink_file: Any, stack: contextlib.ExitStack) -> Any:
    """The training session for ``name`` (in the current default graph) and its train op."""
    import tensorflow as tf
    from rich.console import Console

    import hookbus
    from hookbus._cli._demo import build_linear_regression
    from hookbus.sinks import (
        CheckpointSink,
        ConsoleSink,
        CSVSink,
        EarlyStoppingSink,
        EventLogSink,
        NanGuardSink,
        StopAtStepSink,
        TensorBoardSink,
    )

    model = build_linear_regression()
    hooks: list[Any] = [tf.compat.v1.train.StopAtStepHook(last_step=NEVER)]
    if name == "fetch":
        # bench/_tf1_hooks.py, imported as the benchmarks import it (mypy would check that module too)
        fetch_floor = importlib.import_module("_tf1_hooks").FetchFloor
        hooks.append(fetch_floor({"loss": model.loss, "accuracy": model.accuracy}, 10))
    elif name == "saver":
        hooks.append(tf.compat.v1.train.CheckpointSaverHook(os.path.join(directory, "ckpt"), save_steps=1000))
    elif name != "bare":
        bus = hookbus.EventBus()
        on = name if name in (*SINGLE, "all") else "none"
        path = os.path.join
        if name == "defaults":
            bus.attach(ConsoleSink(Console(file=sink_file, force_terminal=False, width=120), live=False))
            bus.attach(CSVSink(path(directory, "metrics.csv")))
            bus.attach(NanGuardSink("loss"))
            bus.attach(TensorBoardSink(path(directory, "tb")))
            bus.attach(EarlyStoppingSink(monitor="loss", patience=NEVER))
            bus.attach(CheckpointSink(path(directory, "ckpt"), every_n_steps=5000, every_n_secs=None))
            bus.attach(EventLogSink(path(directory, "events.jsonl")))
        if on in ("all", "console"):
            console = Console(file=sink_file, force_terminal=False, width=120)
            bus.attach(ConsoleSink(console, live=False, plain_every_n_secs=0, every_n_secs=0.25))
        if on in ("all", "csv"):
            bus.attach(CSVSink(path(directory, "metrics.csv"), every_n_steps=10))
        if on in ("all", "nan"):
            bus.attach(NanGuardSink("loss", every_n_steps=10))
        if on in ("all", "tensorboard"):
            bus.attach(TensorBoardSink(path(directory, "tb"), every_n_steps=100))
        if on in ("all", "early"):
            bus.attach(EarlyStoppingSink(monitor="loss", patience=NEVER, every_n_steps=100))
        if on in ("all", "checkpoint"):
            bus.attach(CheckpointSink(path(directory, "ckpt"), every_n_steps=1000, every_n_secs=None, keep=5))
        if on in ("all", "event_log"):
            bus.attach(EventLogSink(path(directory, "events.jsonl")))
        if name in ("all", "defaults"):
            bus.attach(StopAtStepSink(last_step=steps))
        if name in ("bus", "event_log"):
            bus.on("after_run", lambda event: None, every_n_steps=10)
        stack.enter_context(bus)
        fetches = {"loss": model.loss, "accuracy": model.accuracy}
        hooks.append(hookbus.EventBusHook(bus, fetches=fetches, train_op=model.train_op))
    session = stack.enter_context(hookbus.monitored_training_session(hooks=hooks))
    return session, model.train_op


def run_one(name: str, steps: int, every: int, trim: bool) -> dict[str, Any]:
    """Train ``steps`` steps of configuration ``name`` in this process, sampling every ``every``."""
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    glibc = Glibc()
    samples: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"soak-rss-{name}-"))
        scratch = os.path.join(directory, "malloc_info.xml")
        sink_file = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack

        def sample(step: int) -> None:
            row: dict[str, Any] = {"step": step, "time": time.perf_counter() - started, **proc_status()}
            row.update(glibc.figures(scratch))
            gc.collect()  # after the RSS: what the collector tracks once garbage is gone
            row["gc_objects"] = len(gc.get_objects())
            if trim and step >= steps:  # at the end only: the run's own course stays untouched
                glibc.trim()
                row["rss_after_trim"] = proc_status()["VmRSS"]
            if step >= steps:
                row["threads"] = sorted(thread_names())
                row["python_threads"] = sorted(t.name for t in threading.enumerate())
            samples.append(row)
            rss = row["VmRSS"] / 2**20
            print(f"{name}: step {step:,}: RSS {rss:.1f} MiB, {row['time']:.0f} s", file=sys.stderr, flush=True)

        with tf.Graph().as_default():
            session, train_op = build_config(name, directory, steps, sink_file, stack)
            run = session.run
            started = time.perf_counter()
            sample(0)
            done = 0
            while done < steps and not session.should_stop():
                chunk = min(every, steps - done)
                for _ in range(chunk):
                    run(train_op)
                    if session.should_stop():
                        break
                done += chunk
                sample(done)
    return {"config": name, "steps": steps, "every": every, "trim": trim, "samples": samples}


def rss_at(samples: list[dict[str, Any]], at: int) -> float | None:
    """RSS (MiB) at the sample nearest to step ``at``, or ``None`` past the last sample."""
    if samples[-1]["step"] < at:
        return None
    return float(min(samples, key=lambda s: abs(s["step"] - at))["VmRSS"]) / 2**20


def print_table(result: dict[str, Any]) -> None:
    marks = result["marks"]
    head = f"{'config':<12} {'steps/s':>8} {'RSS@0':>7} " + " ".join(f"{'@' + _short(m):>7}" for m in marks)
    head += f" {'grow':>6} {'late':>6} {'anon+':>6} {'heap+':>6} {'free+':>6} {'arenas':>6} {'thr':>4} {'gc obj+':>8}"
    if result["trim"]:
        head += f" {'trimmed':>7}"
    print(head)
    print("-" * len(head))
    for run in result["runs"]:
        s = run["samples"]
        first, last = s[0], s[-1]
        rate = last["step"] / max(last["time"], 1e-9)
        cells = [rss_at(s, m) for m in marks]
        line = f"{run['config']:<12} {rate:>8,.0f} {first['VmRSS'] / 2**20:>7.1f} "
        line += " ".join(f"{c:>7.1f}" if c is not None else f"{'-':>7}" for c in cells)
        late = rss_at(s, min(100_000, last["step"]))
        line += f" {(last['VmRSS'] - first['VmRSS']) / 2**20:>+6.1f} {last['VmRSS'] / 2**20 - (late or 0):>+6.1f}"

        line += "".join(f" {_delta(first, last, key)}" for key in ("RssAnon", "heap_in_use", "heap_free"))
        line += f" {last.get('arenas', '-'):>6} {last['Threads']:>4} {last['gc_objects'] - first['gc_objects']:>+8,}"
        if result["trim"]:
            line += f" {(last['rss_after_trim'] - first['VmRSS']) / 2**20:>+7.1f}"
        print(line)
    print(
        "\nRSS@0: MiB after the session was created; @N: RSS at step N (MiB); grow: over the run; "
        "late: from step 100k (or the first sample) to the end; anon+, heap+, free+: growth of RssAnon, "
        "of glibc's bytes in use and of its free bytes over the run; arenas, thr: glibc arenas and "
        "threads at the end; gc obj+: tracked Python objects"
        + ("; trimmed: RSS growth after malloc_trim(0) at the end" if result["trim"] else "")
    )


def _delta(first: dict[str, Any], last: dict[str, Any], key: str) -> str:
    return f"{(last[key] - first[key]) / 2**20:>+6.1f}" if key in last else f"{'-':>6}"


def _short(step: int) -> str:
    return f"{step // 1000}k" if step < 10**6 else f"{step / 10**6:g}M"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--configs", default="bare,bus,all", help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--steps", type=int, default=400_000)
    parser.add_argument("--every", type=int, default=50_000, help="steps between samples")
    parser.add_argument("--trim", action="store_true", help="malloc_trim(0) after the last sample")
    parser.add_argument("--arena-max", type=int, default=None, help="run the children with MALLOC_ARENA_MAX=N")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3,000 steps of bare and all")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    parser.add_argument("--child", default=None, metavar="PATH", help=argparse.SUPPRESS)  # one configuration
    args = parser.parse_args(argv)
    if args.quick:
        args.configs, args.steps, args.every = "bare,all", 3000, 1000
    names = args.configs.split(",")
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configurations {unknown} (known: {', '.join(CONFIGS)})")
    if args.child:
        with open(args.child, "w") as child:
            json.dump(run_one(names[0], args.steps, args.every, args.trim), child)
        return {}
    env = dict(os.environ)
    if args.arena_max is not None:
        env["MALLOC_ARENA_MAX"] = str(args.arena_max)
    runs = []
    with tempfile.TemporaryDirectory(prefix="soak-rss-") as scratch:
        for name in names:
            out = os.path.join(scratch, f"{name}.json")
            command = [sys.executable, os.path.abspath(__file__), "--configs", name, "--steps", str(args.steps)]
            command += ["--every", str(args.every), "--child", out] + (["--trim"] if args.trim else [])
            subprocess.run(command, env=env, check=True)
            with open(out) as fh:
                runs.append(json.load(fh))
            print(f"{name}: done", file=sys.stderr, flush=True)
    marks = [m for m in (100_000, 400_000, 1_000_000) if m <= args.steps] or [args.steps]
    result: dict[str, Any] = {
        "benchmark": "soak_rss",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": platform.python_version(),
        "malloc_arena_max": env.get("MALLOC_ARENA_MAX"),
        "trim": args.trim,
        "steps": args.steps,
        "every": args.every,
        "marks": marks,
        "runs": runs,
    }
    arenas = result["malloc_arena_max"]
    print(f"soak_rss: {args.steps:,} steps, a sample every {args.every:,}; MALLOC_ARENA_MAX={arenas}")
    print_table(result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
