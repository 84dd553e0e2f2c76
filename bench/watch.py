"""``hookbus watch`` on long logs: time and peak memory against a bare JSON pass, a live watch, a replay.

For each of ``--steps`` (default 10^5, 10^6 and 10^7 train steps) a log is written in
EventLogSink's format (a ``begin``, a session, a step record a step with ``loss`` and
``accuracy``, a checkpoint every 1,000 steps, the end and the close; the step lines from a
template checked against the contract's own ``event_log_line``, three times quicker than calling
it), then, each in a process of its own (memory is per process), in interleaved rounds:

- ``bare``: ``for line in f: json.loads(line)`` over the same file, the floor of any reader that
  looks at every record;
- ``watch``: ``hookbus watch --once LOG`` (the dashboard's snapshot of the whole log);
- ``before`` (with ``--before DIR``): the same command with ``PYTHONPATH=DIR``, an older tree's
  ``hookbus`` (``git archive <commit> hookbus sinks``, and a ``hookbus/sinks -> ../sinks`` link).

Each gets wall seconds, CPU seconds (user + system, from ``wait4``) and peak RSS (``ru_maxrss``
of that child alone; the log is written by a child too, so that the parent stays small: a child's
peak counts the parent's pages it shared until its exec); the table gives the median of the
rounds with their range, and ``watch --once`` on a 10-step log (the interpreter, rich and
hookbus imported: what no log length changes), so that growth with the length shows.

``live``: a watcher (``hookbus watch LOG``, plain output, polling every 0.05 s) follows a log a
writer appends to in ``--pieces`` pieces to ``--live-steps``; after each piece (once the watcher
has read it) the watcher's RSS (``VmRSS``) is sampled: flat memory is the last sample close to
the first.

``replay`` (with ``--replay``): ``hookbus.replay(LOG, EventBus())`` of the 10^6-step log (or the
largest below it), a bus with no sinks: the replay's own cost, in rounds like the rest (and, with
``--before DIR``, the older tree's replay interleaved with it).

    python bench/watch.py [--steps 100000 1000000 10000000] [--rounds 3] [--before DIR] [--replay]
                          [--live-steps 1000000] [--pieces 10] [--quick] [--json out.json]

A 10^7-step log is 1.4 GiB on disk (written to ``--scratch``, default the system's temporary
directory) and takes about a minute to write.
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


# A step record as event_log_line writes it (json.dumps writes a float as its repr): checked below.
_STEP = '{"v":1,"record":"step","step":%d,"wall_time":%r,"elapsed":%r,"mode":"train","loss":%r,"accuracy":%r}\n'


def _step_line(step: int) -> str:
    when, elapsed = _START + step * _SECS_PER_STEP, step * _SECS_PER_STEP
    return _STEP % (step, when, elapsed, 1.0 / step + (step % 7) * 1e-3, 0.5 + (step % 13) * 0.01)


def _steps(out: IO[str], first: int, last: int) -> None:
    from hookbus._contract._event_log import event_log_line

    for step in (first, last, 12_345):  # the template writes what the contract writes
        when, elapsed = _START + step * _SECS_PER_STEP, step * _SECS_PER_STEP
        values = {"loss": 1.0 / step + (step % 7) * 1e-3, "accuracy": 0.5 + (step % 13) * 0.01}
        line = event_log_line("step", step=step, wall_time=when, elapsed=elapsed, mode="train", **values)
        if _step_line(step) != line:
            raise RuntimeError(f"the bench's step line {_step_line(step)!r} is not the contract's {line!r}")
    piece: list[str] = []
    for step in range(first, last + 1):
        piece.append(_step_line(step))
        if step % 1000 == 0:
            path = f"ckpt/model.ckpt-{step}"
            when = _START + step * _SECS_PER_STEP
            piece.append(event_log_line("checkpoint_saved", step=step, path=path, value=None, wall_time=when))
            out.write("".join(piece))
            piece.clear()
    out.write("".join(piece))


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


def _child(args: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Run one process to its end: wall seconds, CPU seconds and its own peak RSS (MiB). With
    ``env`` (an older tree on ``PYTHONPATH``) it runs in that tree: ``python -m`` puts the
    working directory first on the path, and this checkout's ``hookbus`` would shadow it."""
    started = time.perf_counter()
    where = None if env is None else env["PYTHONPATH"]
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, env=env, cwd=where)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 3):
        raise RuntimeError(f"{args} exited {child.returncode}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024}


_REPLAY = "import sys, hookbus\nhookbus.replay(sys.argv[1], hookbus.EventBus())\n"


def _watch_args(log: Path) -> list[str]:
    return [sys.executable, "-m", "hookbus._cli._cli", "watch", "--once", str(log)]


def measure(configs: dict[str, tuple[list[str], dict[str, str] | None]], rounds: int) -> dict[str, Any]:
    """Each of ``configs`` (name: arguments, environment) ``rounds`` times, interleaved (the order
    rotates each round): the median of each figure, its range, and the runs."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    names = list(configs)
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            runs[name].append(_child(*configs[name]))
    table: dict[str, Any] = {}
    for name, samples in runs.items():
        row: dict[str, Any] = {field: statistics.median(s[field] for s in samples) for field in samples[0]}
        row["range"] = {field: (min(s[field] for s in samples), max(s[field] for s in samples)) for field in samples[0]}
        row["runs"] = samples
        table[name] = row
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


def _row(name: str, row: dict[str, Any]) -> str:
    cells = [f"{row[f]:.2f} [{row['range'][f][0]:.2f}–{row['range'][f][1]:.2f}]" for f in ("wall_s", "cpu_s")]
    rss = row["range"]["peak_rss_mib"]
    cells.append(f"{row['peak_rss_mib']:.1f} [{rss[0]:.1f}–{rss[1]:.1f}]")
    return f"{name:10}" + "".join(f"{cell:>22}" for cell in cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="an older tree to run watch --once from too")
    parser.add_argument("--replay", action="store_true", help="time hookbus.replay of the 10^6-step log")
    parser.add_argument("--live-steps", type=int, default=1_000_000)
    parser.add_argument("--pieces", type=int, default=10)
    parser.add_argument("--no-live", action="store_true", help="skip the live watch")
    parser.add_argument("--scratch", type=Path, default=None, help="where the logs are written")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20,000 steps, one round, 4 pieces")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--write", type=Path, default=None, help=argparse.SUPPRESS)  # a child's job: the log
    args = parser.parse_args()
    if args.write is not None:
        write_log(args.write, args.steps[0])
        return
    quick = args.quick
    sizes, rounds = ([20_000], 1) if quick else (sorted(args.steps), args.rounds)
    live_steps, pieces = (20_000, 4) if quick else (args.live_steps, args.pieces)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; steps {sizes}, {rounds} round(s)")
    before_env = None if args.before is None else {**os.environ, "PYTHONPATH": str(args.before.resolve())}
    report: dict[str, Any] = {"sizes": {}}
    with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
        tiny = Path(scratch) / "tiny.jsonl"
        subprocess.run([sys.executable, __file__, "--write", str(tiny), "--steps", "10"], check=True)
        base = measure({"watch": (_watch_args(tiny), None)}, rounds)["watch"]
        report["imports"] = base
        print(f"watch --once on a 10-step log (imports, no log): peak RSS {base['peak_rss_mib']:.1f} MiB")
        header = "".join(f"{h:>22}" for h in ("wall s", "CPU s", "peak RSS MiB"))
        replayed: Path | None = None
        for steps in sizes:
            log = Path(scratch) / f"events-{steps}.jsonl"
            started = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--write", str(log), "--steps", str(steps)], check=True)
            written, size = time.perf_counter() - started, log.stat().st_size
            configs: dict[str, tuple[list[str], dict[str, str] | None]] = {
                "bare": ([sys.executable, "-c", _BARE, str(log)], None),
                "watch": (_watch_args(log), None),
            }
            if before_env is not None:
                configs["before"] = (_watch_args(log), before_env)
            table = measure(configs, rounds)
            print(
                f"\n{steps:,} steps: log {size / 2**20:,.1f} MiB "
                f"({size / (steps + steps // 1000):.0f} bytes a record), written in {written:.1f} s"
            )
            print(f"{'':10}{header}")
            for name, row in table.items():
                print(_row(name, row))
            watch = table["watch"]
            print(
                f"watch / bare (medians): wall {watch['wall_s'] / table['bare']['wall_s']:.2f}, "
                f"CPU {watch['cpu_s'] / table['bare']['cpu_s']:.2f}; peak RSS above the 10-step log's: "
                f"{watch['peak_rss_mib'] - base['peak_rss_mib']:+.1f} MiB"
            )
            report["sizes"][str(steps)] = {"log_bytes": size, "written_s": written, **table}
            if steps <= 1_000_000 or replayed is None:
                replayed = log
        if args.replay and replayed is not None:
            replays: dict[str, tuple[list[str], dict[str, str] | None]] = {
                "replay": ([sys.executable, "-c", _REPLAY, str(replayed)], None)
            }
            if before_env is not None:
                replays["before"] = ([sys.executable, "-c", _REPLAY, str(replayed)], before_env)
            table = measure(replays, rounds)
            print(f"\nreplay of {replayed.name} (hookbus.replay, a bus with no sinks):")
            print(f"{'':10}{header}")
            for name, row in table.items():
                print(_row(name, row))
            report["replay"] = {"log": replayed.name, **table["replay"]}
            if "before" in table:
                report["replay_before"] = table["before"]
        if not args.no_live:
            followed = live(Path(scratch) / "live.jsonl", live_steps, pieces)
            rss = ", ".join(f"{s['step']:,}: {s['rss_mib']:.1f}" for s in followed["samples"])
            print(f"\nlive watch RSS MiB after each piece (step: MiB): {rss}; growth {followed['growth_mib']:+.1f} MiB")
            report["live"] = followed
    if args.json is not None:
        report.update(
            when=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            python=platform.python_version(),
            load_average=load,
            rounds=rounds,
        )
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
