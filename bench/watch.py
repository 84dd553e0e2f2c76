"""``hookbus watch`` on a long log: time and peak memory against a bare JSON pass, and a live watch.

A log of ``--steps`` train steps is written in EventLogSink's format (the contract's own
``event_log_line``: a ``begin``, a session, a step record a step with ``loss`` and ``accuracy``,
a checkpoint every 1,000 steps, the end and the close), then, each in a process of its own (memory
is per process), in interleaved rounds:

- ``bare``: ``for line in f: json.loads(line)`` over the same file, the floor of any reader that
  looks at every record;
- ``watch``: ``hookbus watch --once LOG`` (the dashboard's snapshot of the whole log).

Each gets wall seconds, CPU seconds (user + system, from ``wait4``) and peak RSS (``ru_maxrss``
of that child alone; the log is written by a child too, so that the parent stays small: a child's
peak counts the parent's pages it shared until its exec); the table gives the median of the
rounds and ``watch`` over ``bare``.

``live``: a watcher (``hookbus watch LOG``, plain output, polling every 0.05 s) follows a log a
writer appends to in ``--pieces`` pieces; after each piece (once the watcher has read it) the
watcher's RSS (``VmRSS``) is sampled: flat memory is the last sample close to the first.

    python bench/watch.py [--steps 1000000] [--rounds 3] [--pieces 10] [--quick] [--json out.json]
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
from typing import IO, Any

_BARE = "import json, sys\nwith open(sys.argv[1], 'rb') as f:\n    for line in f:\n        json.loads(line)\n"
_START = 1.7e9  # the log's first wall time
_SECS_PER_STEP = 0.001


def _head(out: IO[str], steps: int) -> None:
    # Imported here: the children measured are started before, and a child's peak RSS counts the
    # parent's pages it shared until its exec.
    from hookbus._contract._event_log import event_log_line

    out.write(
        event_log_line(
            "begin",
            step=0,
            wall_time=_START,
            mode="train",
            keys=["accuracy", "loss"],
            shapes={"accuracy": None, "loss": None},
            total_steps=steps,
            hparams=None,
            task=None,
            flush_secs=5.0,
        )
    )
    out.write(event_log_line("session_created", step=0, wall_time=_START, mode="train", restored=False, rewound=False))


def _steps(out: IO[str], first: int, last: int) -> None:
    from hookbus._contract._event_log import event_log_line

    for step in range(first, last + 1):
        when = _START + step * _SECS_PER_STEP
        loss, accuracy = 1.0 / step + (step % 7) * 1e-3, 0.5 + (step % 13) * 0.01
        elapsed = step * _SECS_PER_STEP
        values = {"loss": loss, "accuracy": accuracy}
        out.write(event_log_line("step", step=step, wall_time=when, elapsed=elapsed, mode="train", **values))
        if step % 1000 == 0:
            path = f"ckpt/model.ckpt-{step}"
            out.write(event_log_line("checkpoint_saved", step=step, path=path, value=None, wall_time=when))


def _tail(out: IO[str], steps: int) -> None:
    from hookbus._contract._event_log import event_log_line

    when = _START + steps * _SECS_PER_STEP
    out.write(event_log_line("end", step=steps, wall_time=when, mode="train"))
    out.write(event_log_line("close", step=steps, wall_time=when, ended="finished"))


def write_log(path: Path, steps: int) -> None:
    """A finished run of ``steps`` steps, as EventLogSink writes it."""
    with open(path, "w", encoding="utf-8") as out:
        _head(out, steps)
        _steps(out, 1, steps)
        _tail(out, steps)


def _child(args: list[str]) -> dict[str, float]:
    """Run one process to its end: wall seconds, CPU seconds and its own peak RSS (MiB)."""
    started = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 3):
        raise RuntimeError(f"{args} exited {child.returncode}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024}


def measure(log: Path, rounds: int) -> dict[str, Any]:
    """``bare`` and ``watch`` over ``log``, interleaved (the order alternates each round)."""
    configs = {
        "bare": [sys.executable, "-c", _BARE, str(log)],
        "watch": [sys.executable, "-m", "hookbus._cli._cli", "watch", "--once", str(log)],
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    for round_ in range(rounds):
        order = list(configs) if round_ % 2 == 0 else list(reversed(configs))
        for name in order:
            runs[name].append(_child(configs[name]))
    table: dict[str, Any] = {}
    for name, samples in runs.items():
        table[name] = {field: statistics.median(s[field] for s in samples) for field in samples[0]}
        table[name]["runs"] = samples
    table["ratio"] = {
        field: table["watch"][field] / table["bare"][field] for field in ("wall_s", "cpu_s", "peak_rss_mib")
    }
    return table


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _settled(pid: int) -> None:
    """Wait until the watcher has read what is there: its CPU time stops growing for a while."""
    last, quiet = _cpu_ticks(pid), 0
    while quiet < 5:
        time.sleep(0.1)
        now = _cpu_ticks(pid)
        quiet = quiet + 1 if now == last else 0
        last = now


def live(path: Path, steps: int, pieces: int) -> dict[str, Any]:
    """A watcher following a log written in ``pieces``: its RSS after each (MiB)."""
    with open(path, "w", encoding="utf-8") as out:
        _head(out, steps)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "hookbus._cli._cli", "watch", str(path), "--interval", "0.05"],
        stdout=subprocess.DEVNULL,
    )
    samples: list[dict[str, float]] = []
    try:
        per = steps // pieces
        for piece in range(pieces):
            first, last = piece * per + 1, steps if piece == pieces - 1 else (piece + 1) * per
            with open(path, "a", encoding="utf-8") as out:
                _steps(out, first, last)
            _settled(watcher.pid)
            samples.append({"step": last, "rss_mib": _rss_mib(watcher.pid)})
        with open(path, "a", encoding="utf-8") as out:
            _tail(out, steps)
        status = watcher.wait(timeout=120)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    return {
        "exit_status": status,
        "samples": samples,
        "growth_mib": samples[-1]["rss_mib"] - samples[0]["rss_mib"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pieces", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20,000 steps, one round, 4 pieces")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--write", type=Path, default=None, help=argparse.SUPPRESS)  # a child's job: the log
    args = parser.parse_args()
    if args.write is not None:
        write_log(args.write, args.steps)
        return
    steps, rounds, pieces = (20_000, 1, 4) if args.quick else (args.steps, args.rounds, args.pieces)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {steps:,} steps, {rounds} round(s)")
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "events.jsonl"
        subprocess.run([sys.executable, __file__, "--write", str(log), "--steps", str(steps)], check=True)
        size = log.stat().st_size
        table = measure(log, rounds)
        followed = live(Path(scratch) / "live.jsonl", steps, pieces)
    print(f"log: {size / 2**20:,.1f} MiB")
    print(f"{'':8}{'wall s':>10}{'cpu s':>10}{'peak RSS MiB':>14}")
    for name in ("bare", "watch"):
        row = table[name]
        print(f"{name:8}{row['wall_s']:>10.2f}{row['cpu_s']:>10.2f}{row['peak_rss_mib']:>14.1f}")
    ratio = table["ratio"]
    print(f"{'x bare':8}{ratio['wall_s']:>10.2f}{ratio['cpu_s']:>10.2f}{ratio['peak_rss_mib']:>14.1f}")
    rss = ", ".join(f"{s['step']:,}: {s['rss_mib']:.1f}" for s in followed["samples"])
    print(f"live watch RSS MiB after each piece (step: MiB): {rss}; growth {followed['growth_mib']:+.1f} MiB")
    if args.json is not None:
        report = {
            "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "load_average": load,
            "steps": steps,
            "rounds": rounds,
            "log_bytes": size,
            "once": table,
            "live": followed,
        }
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
