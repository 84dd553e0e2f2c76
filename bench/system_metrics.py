"""What sampling the machine costs (``EventBus(system_metrics=...)``): an idle bus with and without
it, side by side, and one sample's cost and size.

Three measurements:

    idle        process CPU time of a run that is open and idle (a publisher began, no step comes:
                what a training waiting on its input looks like) for ``--idle`` seconds, in
                child processes started together, side by side: ``off`` (``system_metrics=False``)
                and ``on`` (the default period, 10 s, or ``--period``), each with an event log and
                the dashboard's sink attached (plain lines), so the samples are written as in a
                real run. ``--runs`` pairs. The sampler's cost is ``on`` minus ``off``, in percent
                of one core.
    per_sample  one sample taken and delivered on this thread (``sample_system``) to an event log,
                TensorBoard and CSV: CPU and wall time per sample over ``--samples`` of them. At
                the default period, a sample's CPU time over 10 s is the cost in percent of one
                core that the idle pairs measure with all their noise.
    bytes       one sample's line in the event log: what a long run's log grows by, per sample.

    python bench/system_metrics.py [--idle 60] [--runs 3] [--period 10] [--samples 200] [--quick]
                                   [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hookbus  # noqa: E402
from hookbus.sinks import ConsoleSink, CSVSink, EventLogSink, TensorBoardSink  # noqa: E402
from hookbus.testing import ScriptedPublisher  # noqa: E402

TARGET_PERCENT = 0.5  # of one core, at the default period (issue 48)


def idle_child(period: float | None, idle: float, directory: str) -> dict[str, float]:
    """One idle run (in this process): its process CPU seconds over ``idle`` wall seconds."""
    import io

    from rich.console import Console

    bus = hookbus.EventBus(system_metrics=False if period is None else period)
    bus.attach(EventLogSink(Path(directory) / "events.jsonl"))
    bus.attach(ConsoleSink(Console(file=io.StringIO()), live=False))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(idle)  # the run is open and idle: no step comes
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        pub.end()
    return {"cpu_s": cpu, "wall_s": wall}


def idle_pairs(runs: int, idle: float, period: float) -> list[dict[str, dict[str, float]]]:
    """``runs`` pairs of idle children, each pair started together (the same machine load)."""
    pairs = []
    for _ in range(runs):
        children = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, value in (("off", "off"), ("on", str(period))):
                os.makedirs(os.path.join(tmp, name))
                command = [
                    sys.executable,
                    __file__,
                    "--child",
                    value,
                    "--idle",
                    str(idle),
                    "--dir",
                    os.path.join(tmp, name),
                ]
                children[name] = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            pair = {}
            for name, child in children.items():
                out, _ = child.communicate(timeout=idle + 120)
                if child.returncode != 0:
                    raise RuntimeError(f"the {name} child failed ({child.returncode})")
                pair[name] = json.loads(out.strip().splitlines()[-1])
        pairs.append(pair)
    return pairs


def per_sample(samples: int) -> dict[str, Any]:
    """Samples taken and delivered on this thread to an event log, TensorBoard and CSV."""
    # TensorFlow loaded here, as a training has it: else the TensorBoard writer's thread imports it at
    # its first write, within the sink's flush deadline (30 s), which a loaded machine can miss.
    import tensorflow  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        bus = hookbus.EventBus(system_metrics=3600.0)  # the thread takes only the run's last one
        bus.attach(EventLogSink(Path(tmp) / "events.jsonl"))
        bus.attach(TensorBoardSink(Path(tmp) / "tb"))
        bus.attach(CSVSink(Path(tmp) / "m.csv", system=True))
        pub = ScriptedPublisher(bus, ["loss"])
        with bus:
            pub.begin()
            pub.session(0)
            pub.sample_system()  # the first: NVML's start and the notice, not counted
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(samples):
                pub.sample_system()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            pub.end()
        lines = [line for line in (Path(tmp) / "events.jsonl").read_text().splitlines() if '"record":"system"' in line]
        sizes = [len(line.encode()) + 1 for line in lines[1:]]  # with its newline; the first has the notice
    return {
        "samples": samples,
        "cpu_ms_per_sample": 1000 * cpu / samples,
        "wall_ms_per_sample": 1000 * wall / samples,
        "bytes_per_sample": statistics.median(sizes),
        "first_sample_bytes": len(lines[0].encode()) + 1,
        "keys_per_sample": len([k for k in json.loads(lines[1]) if k.startswith("system/")]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=float, default=60.0, help="idle seconds per child (default 60)")
    parser.add_argument("--runs", type=int, default=3, help="pairs of idle children (default 3)")
    parser.add_argument("--period", type=float, default=10.0, help="the sampling period of 'on' (default 10)")
    parser.add_argument("--samples", type=int, default=200, help="samples timed on this thread (default 200)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 pairs of 2 s, period 0.5 s, 20 samples")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        period = None if args.child == "off" else float(args.child)
        print(json.dumps(idle_child(period, args.idle, args.dir)))
        return 0
    if args.quick:
        args.idle, args.runs, args.period, args.samples = 2.0, 2, 0.5, 20
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        f"system_metrics: {platform.node()} load {load}, idle {args.idle:g} s x {args.runs}, period {args.period:g} s"
    )
    sample = per_sample(args.samples)
    pairs = idle_pairs(args.runs, args.idle, args.period)
    percent = {name: [100 * p[name]["cpu_s"] / p[name]["wall_s"] for p in pairs] for name in ("off", "on")}
    cost = [on - off for on, off in zip(percent["on"], percent["off"], strict=True)]
    from_sample = 100 * sample["cpu_ms_per_sample"] / 1000 / args.period

    def spread(values: list[float]) -> dict[str, Any]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}

    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "load": load,
        "idle_s": args.idle,
        "period_s": args.period,
        "runs": args.runs,
        "per_sample": sample,
        "idle_percent_of_a_core": {name: spread(values) for name, values in percent.items()},
        "sampler_percent_of_a_core": spread(cost),
        "sampler_percent_from_per_sample": from_sample,
        "targets": [
            [
                f"sampler <= {TARGET_PERCENT} % of a core at the period (per sample / period)",
                from_sample <= TARGET_PERCENT,
            ]
        ],
    }
    print(f"{'':24}{'median':>10} {'[min-max]':>22}")
    for name in ("off", "on"):
        s = result["idle_percent_of_a_core"][name]
        print(f"idle run, sampling {name:4} {s['median']:9.3f}% [{s['min']:.3f}-{s['max']:.3f}] of a core")
    s = result["sampler_percent_of_a_core"]
    print(f"on - off                {s['median']:9.3f}% [{s['min']:.3f}-{s['max']:.3f}] of a core")
    print(
        f"one sample: {sample['cpu_ms_per_sample']:.2f} ms CPU ({sample['wall_ms_per_sample']:.2f} ms wall), "
        f"{sample['bytes_per_sample']:.0f} bytes in the event log ({sample['keys_per_sample']} values); "
        f"at a {args.period:g} s period: {from_sample:.4f}% of a core"
    )
    for text, met in result["targets"]:
        print(f"targets: {text}: {'met' if met else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
