"""``hookbus watch DIR`` over many runs: the first table, its memory, and what following costs.

Runs are written by the real sink (``EventLogSink`` under a scripted publisher, with the summary it
keeps beside each log), ``--steps`` train steps each with an evaluation every 100; the long run is a
log of ``--long`` steps in the sink's format (bench/watch.py's writer) with the summary the sink
leaves at its close. Each measurement is a fresh ``hookbus watch`` process (``os.wait4`` gives its
CPU time and peak RSS):

- ``first table``: ``hookbus watch DIR --once --format json`` over 1, 10, 100, 1,000 runs
  (``--runs``): wall time, CPU, peak RSS;
- ``long run``: the same over one run whose log has ``--long`` steps (its row from the summary),
  beside ``read_event_log`` of that log, for scale;
- ``following``: ``hookbus watch DIR`` (plain, polling every 0.5 s) over the 100 runs for
  ``--follow-secs``: its CPU time over that wall time, as a share of one core;
- ``live table``: the table a terminal of 80x24 shows over the most runs, in this process: a read
  of every row (a ``stat`` each, the summaries already read once), and the frame drawn after a key
  (sorting by the next column, moving the selection), median of 20 keys.

Targets (issue 49): 100 runs ≤ 1 s, 1,000 runs ≤ 5 s and ≤ 200 MiB; a 10^6-step run's row ≤ 0.1 s
(of the table's process, beyond its start-up); following 100 live runs ≤ 5 % of one core.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def live_table(root: Path) -> dict[str, Any]:
    """The live table's costs over the runs in ``root``, drawn on an 80x24 console in memory."""
    import io
    import statistics

    from rich.console import Console

    from hookbus._watch._browse import TableScreen
    from hookbus._watch._sweep import Sweep, SweepOptions

    console = Console(file=io.StringIO(), width=80, height=24, color_system=None, force_terminal=True)
    screen = TableScreen(Sweep(root), SweepOptions(), console, keys_line=True)
    screen.read()  # the first read takes in every summary; the next ones a stat each
    t0 = time.perf_counter()
    screen.read()
    read = time.perf_counter() - t0
    _, page = screen.frame()
    frames = []
    for key in ["s", "down"] * 10:
        t0 = time.perf_counter()
        screen.press(key, page)
        frame, page = screen.frame()
        console.print(frame)
        frames.append(time.perf_counter() - t0)
        console.file = io.StringIO()
    return {"runs": len(screen.every), "read_s": read, "key_frame_s": statistics.median(frames), "keys": len(frames)}


def make_runs(root: Path, count: int, steps: int) -> None:
    """``count`` runs of ``steps`` steps, written by EventLogSink (reused: more are added as needed)."""
    import hookbus
    from hookbus.sinks import EventLogSink
    from hookbus.testing import FakeClock, ScriptedPublisher

    for index in range(count):
        run = root / f"lr-{index:04d}"
        if (run / "events.summary.json").exists():
            continue
        lr = 0.001 * (index + 1)
        bus = hookbus.EventBus(clock=FakeClock(), handle_signals=False)
        bus.attach(EventLogSink(run / "events.jsonl", hparams={"lr": lr, "optimizer": "sgd"}))
        bus.on("after_run", lambda e: None, every_n_steps=10)
        pub = ScriptedPublisher(bus, keys=["loss"])
        evaluate = ScriptedPublisher(bus, keys=["loss"], mode="eval")
        with bus:
            pub.begin()
            pub.session(0)
            for step in range(1, steps + 1):
                pub.advance({"loss": 1.0 / (1 + lr * step)})
                if step % 100 == 0:
                    evaluate.evaluate({"loss": 1.1 / (1 + lr * step)}, step=step)
            pub.end()


def make_long(root: Path, steps: int) -> Path:
    """One run with a ``steps``-step log and the summary its sink would leave."""
    import hookbus
    from hookbus.sink_api import run_summary_path

    spec = importlib.util.spec_from_file_location("bench_watch", ROOT / "bench" / "watch.py")
    assert spec is not None
    assert spec.loader is not None
    watch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(watch)
    log = root / "long" / "events.jsonl"
    if not run_summary_path(log).exists():
        log.parent.mkdir(parents=True, exist_ok=True)
        watch.write_log(log, steps)
        summary = hookbus.read_run_summary(log)  # folds the whole log once, as the sink did while writing it
        with log.open("rb") as f:
            tail = f.read()[-64:]
        stat = log.stat()
        run_summary_path(log).write_text(summary.to_json(stat.st_size, stat.st_ino, tail))
    return log


def child(args: list[str], *, seconds: float | None = None) -> dict[str, float]:
    """Run ``python -m hookbus`` with ``args`` (stopped with SIGINT after ``seconds``): wall, CPU, peak RSS."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "hookbus", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background job's children ignore it
    )
    if seconds is not None:
        time.sleep(seconds)
        process.send_signal(signal.SIGINT)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "status": float(process.returncode),
    }


def startup() -> dict[str, float]:
    """``hookbus --version``: the start-up every measurement includes."""
    return child(["--version"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--steps", type=int, default=1000, help="train steps of each run of the sweep")
    parser.add_argument("--long", type=int, default=1_000_000, help="steps of the long run's log")
    parser.add_argument("--follow-secs", type=float, default=20.0)
    parser.add_argument("--scratch", type=Path, default=None, help="where the runs are kept (reused)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 and 3 runs of 50 steps, a short log")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.steps, args.long, args.follow_secs = [1, 3], 50, 2000, 2.0
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="hookbus-sweep-"))
    print(f"load average {os.getloadavg()[0]:.2f}; runs in {scratch}")
    result: dict[str, Any] = {"startup": startup(), "first_table": {}, "steps": args.steps}
    made = 0
    for count in sorted(args.runs):
        sweep = scratch / f"sweep-{args.steps}"
        t0 = time.perf_counter()
        make_runs(sweep, count, args.steps)
        made = max(made, count)
        sized = scratch / f"sweep-{args.steps}-{count}"
        if not sized.exists():
            sized.mkdir()
            for index in range(count):
                (sized / f"lr-{index:04d}").symlink_to(sweep / f"lr-{index:04d}")
        print(f"{count} runs ready in {time.perf_counter() - t0:.1f} s")
        result["first_table"][str(count)] = row = child(["watch", str(sized), "--once", "--format", "json"])
        print(
            f"first table, {count:>5} runs: {row['wall_s']:.2f} s wall, {row['cpu_s']:.2f} s CPU, "
            f"{row['peak_rss_mib']:.0f} MiB peak"
        )
    long_log = make_long(scratch / "long-sweep", args.long)
    import hookbus

    t0 = time.perf_counter()
    hookbus.read_event_log(long_log)
    whole = time.perf_counter() - t0
    result["long_run"] = row = child(["watch", str(long_log.parent.parent), "--once", "--format", "json"])
    row["read_event_log_s"] = whole
    row["log_mib"] = long_log.stat().st_size / 2**20
    print(
        f"long run ({args.long} steps, {row['log_mib']:.0f} MiB log): {row['wall_s']:.2f} s wall "
        f"({row['wall_s'] - result['startup']['wall_s']:.2f} s beyond start-up); read_event_log {whole:.2f} s"
    )
    follow_count = max(c for c in args.runs if c <= 100)
    following = scratch / f"sweep-{args.steps}-{follow_count}"
    result["following"] = row = child(["watch", str(following), "--follow"], seconds=args.follow_secs)
    row["runs"] = follow_count
    row["core_share"] = (row["cpu_s"] - result["startup"]["cpu_s"]) / args.follow_secs
    print(
        f"following {follow_count} runs for {args.follow_secs:.0f} s: {row['cpu_s']:.2f} s CPU "
        f"({100 * row['core_share']:.1f} % of a core beyond start-up)"
    )
    result["live_table"] = row = live_table(scratch / f"sweep-{args.steps}-{max(args.runs)}")
    print(
        f"live table, {row['runs']} runs at 80x24: a read {1000 * row['read_s']:.0f} ms, "
        f"a key's frame {1000 * row['key_frame_s']:.0f} ms (median of {row['keys']})"
    )
    print("targets: 100 runs <= 1 s, 1000 runs <= 5 s and <= 200 MiB, a long run's row <= 0.1 s, following <= 5 %")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    if args.scratch is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
