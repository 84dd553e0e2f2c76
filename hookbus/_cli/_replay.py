"""``hookbus replay``: a recorded run (an event log), or every run of a directory of runs, fed to new sinks.

A log is replayed through :func:`hookbus.replay` on a bus holding the sinks asked for. A directory
of runs (a sweep, as ``hookbus watch DIR`` finds them: each directory holding event logs is one
run, a cluster's workers' logs included) replays each run's chief log in turn, by name:
``--mlflow`` makes one MLflow run per run (named after its directory, tagged with the log's
identity, so a second upload, or one after a replay killed mid-way, continues each run and adds
only the points it lacks), ``--csv`` writes one file with a ``run`` column first,
``--tensorboard`` one subdirectory per run (TensorBoard's own layout of runs), and
``--early-stopping`` says per run where the rule would have stopped it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hookbus._cli._arguments import positive_int
from hookbus._cli._startup_notices import held_startup_notices
from hookbus._tf._import import require_tensorflow

if TYPE_CHECKING:
    from hookbus import ReplayResult
    from hookbus.sinks import EarlyStoppingSink, MLflowSink

__all__ = ["add_replay", "replay_command"]

# CSVSink's train file, its <stem>.eval.csv and <stem>.test.csv, and with --system its <stem>.system.csv
_CSV_KINDS = ("", ".eval", ".test", ".system")
_RUN_COLUMN = "run"  # the merged CSV's first column: the run's name


def add_replay(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``replay`` command's arguments."""
    replay = commands.add_parser(
        "replay",
        help="rebuild outputs from a run recorded by EventLogSink (or a directory of runs), or try a stop rule on it",
        description="Feed a recorded run (an EventLogSink log) to new sinks with the schedules given "
        "here: --csv and --tensorboard rebuild those outputs; --early-stopping prints where that rule "
        "would have stopped the run; --mlflow uploads it. Only steps the log holds can be replayed. "
        "Given a directory of runs (each directory holding event logs is a run; a cluster's run is "
        "replayed from its chief's log), every run is replayed: one MLflow run per run, named after its "
        "directory; one CSV file with a `run` column first; one TensorBoard subdirectory per run.",
    )
    replay.add_argument("log", type=Path, help="the event log (EventLogSink's file), or a directory of runs")
    replay.add_argument("--csv", type=Path, default=None, help="write CSVSink's files here")
    replay.add_argument(
        "--csv-every-n-steps", type=positive_int, default=10, help="CSV rows every n steps (default 10, as CSVSink)"
    )
    replay.add_argument("--tensorboard", type=Path, default=None, help="write TensorBoardSink's event files here")
    replay.add_argument(
        "--tensorboard-every-n-steps",
        type=positive_int,
        default=100,
        help="TensorBoard summaries every n steps (default 100, as TensorBoardSink)",
    )
    replay.add_argument(
        "--early-stopping",
        metavar="SPEC",
        default=None,
        help='EarlyStoppingSink arguments, e.g. "monitor=eval/loss,patience=5,min_delta=0.001"',
    )
    replay.add_argument(
        "--mlflow",
        metavar="URI",
        default=None,
        help="upload the run to this MLflow tracking URI (http://host:5000, sqlite:///mlflow.db) with its "
        "names, steps and wall times; a second upload of the same log continues the same run and adds nothing",
    )
    replay.add_argument(
        "--system",
        action="store_true",
        help="also write the machine's samples the log holds (its system records), as the sinks' system=True "
        "writes them live: <stem>.system.csv, the TensorBoard run system, MLflow's system metrics (each once)",
    )
    replay.add_argument("--mlflow-experiment", default="hookbus", help="its MLflow experiment (default hookbus)")
    replay.add_argument(
        "--mlflow-run-name",
        default=None,
        help="its MLflow run name (default: MLflow picks one; for a directory of runs, each run's directory)",
    )


def _spec(text: str) -> dict[str, Any]:
    """``"monitor=eval/loss,patience=5"`` as keyword arguments (ints, floats, true/false, strings)."""
    found: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"expected name=value pairs separated by commas (got {item!r})")
        value: object = raw.strip()
        for convert in (int, float):
            try:
                value = convert(raw)
                break
            except ValueError:
                continue
        if raw.strip().lower() in ("true", "false"):
            value = raw.strip().lower() == "true"
        found[name.strip()] = value
    return found


_OPTIONS = (
    "  --csv FILE             rebuild CSVSink's files (FILE and its .eval.csv)\n"
    "  --tensorboard DIR      rebuild TensorBoardSink's event files in DIR\n"
    '  --early-stopping SPEC  say where a stop rule would have stopped it, e.g. "monitor=eval/loss,patience=5"\n'
    "  --mlflow URI           upload it to an MLflow tracking server or store (once, however often run)"
)


def _nothing_to_do(log: Path, records: list[dict[str, Any]]) -> str:
    """What ``hookbus replay LOG`` without an output option prints: what the log holds, what to ask."""
    steps = [r["step"] for r in records if r["record"] == "step"]
    keys = sorted({k for r in records if r["record"] == "begin" for k in r.get("keys", ())})
    held = f"{len(steps)} step records" + (f" up to step {max(steps)}" if steps else "")
    if keys:
        held += f" (keys: {', '.join(keys)})"
    return f"hookbus replay: nothing asked for; {log} holds {held}. Give one or more of:\n{_OPTIONS}"


def _asked(args: argparse.Namespace) -> bool:
    return not (args.csv is None and args.tensorboard is None and args.early_stopping is None and args.mlflow is None)


def replay_command(args: argparse.Namespace) -> int:
    """``hookbus replay``: returns the process exit status."""
    with contextlib.ExitStack() as stack:  # what the upload needs until it is done
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        with held_startup_notices():
            if args.tensorboard is not None and importlib.util.find_spec("tensorflow") is not None:
                require_tensorflow("hookbus replay")  # TensorBoard's writer imports it: its notices are held here
            import hookbus.sinks  # noqa: F401 - loaded under the held notices
        if args.log.is_dir():
            return _replay_runs(args, stack)
        return _replay_one(args, stack)


@dataclass(frozen=True)
class _Replayed:
    """One log's replay: its result and the sinks whose outcome is reported."""

    result: ReplayResult
    tracker: MLflowSink | None
    early: EarlyStoppingSink | None

    def unshipped(self) -> str | None:
        """Why the MLflow upload did not complete, or ``None``."""
        shipped = self.tracker.writer_stats() if self.tracker is not None else None
        return shipped.unreachable if shipped is not None else None

    def run_id(self) -> str | None:
        run = self.tracker.run if self.tracker is not None else None
        return run.run_id if run is not None else None


def _replay_log(
    args: argparse.Namespace,
    log: Path,
    records: list[dict[str, Any]],
    *,
    csv_path: Path | None,
    tensorboard: Path | None,
    run_name: str | None,
    spool: Path | None,
) -> _Replayed:
    """Replay ``log`` (its ``records``) on a new bus holding the sinks asked for."""
    import hookbus
    from hookbus._publishing._replay import recorded_run_key
    from hookbus.sinks import CSVSink, EarlyStoppingSink, TensorBoardSink

    hparams = next((r["hparams"] for r in records if r["record"] == "begin" and r.get("hparams")), None)
    bus = hookbus.EventBus()
    if csv_path is not None:
        bus.attach(CSVSink(csv_path, every_n_steps=args.csv_every_n_steps, system=args.system))
    if tensorboard is not None:
        bus.attach(
            TensorBoardSink(
                tensorboard, every_n_steps=args.tensorboard_every_n_steps, hparams=hparams, system=args.system
            )
        )
    tracker = None
    if args.mlflow is not None:
        from hookbus.sinks import MLflowSink

        assert spool is not None, "an upload has its spool (_spool)"
        # The sink's own files (its spool, its run's id) live for this upload only: the log is
        # the source, and an upload run again adds only what the run lacks (continue_ended).
        tracker = bus.attach(
            MLflowSink(
                args.mlflow,
                experiment=args.mlflow_experiment,
                run_name=run_name,
                hparams=hparams,
                every_n_steps=1,
                run_key=recorded_run_key(records),
                continue_ended=True,
                directory=spool,
                system=args.system,
            )
        )
    early = bus.attach(EarlyStoppingSink(**_spec(args.early_stopping))) if args.early_stopping is not None else None
    return _Replayed(hookbus.replay(log, bus), tracker, early)


def _spool(args: argparse.Namespace, stack: contextlib.ExitStack) -> Path | None:
    if args.mlflow is None:
        return None
    return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hookbus-replay-")))


def _unshipped_message(problem: str, runs: str = "run") -> str:
    return (
        f"hookbus replay: the MLflow upload did not complete: {problem}; run it again once MLflow answers "
        f"(it adds only what the {runs} lacks)"
    )


def _stop_line(replayed: _Replayed) -> str:
    early, result = replayed.early, replayed.result
    assert early is not None
    if result.stopped:
        return f"{early.name} would have stopped at step {result.stop_step}: {result.stop_reason}"
    return f"{early.name} would not have stopped: the log ends at step {result.last_step} ({early.status()})"


def _replay_one(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    import hookbus

    try:
        records = hookbus.read_event_log(args.log)
        if not _asked(args):
            print(_nothing_to_do(args.log, records), file=sys.stderr)
            return 2
        replayed = _replay_log(
            args,
            args.log,
            records,
            csv_path=args.csv,
            tensorboard=args.tensorboard,
            run_name=args.mlflow_run_name,
            spool=_spool(args, stack),
        )
    except (OSError, ValueError, TypeError, ImportError) as error:
        print(f"hookbus replay: {error}", file=sys.stderr)
        return 2
    result = replayed.result
    print(f"replayed {result.steps} step records of {args.log} (last step {result.last_step})")
    problem = replayed.unshipped()
    if problem is not None:
        print(_unshipped_message(problem), file=sys.stderr)
        return 1
    if replayed.tracker is not None:
        print(f"MLflow run {replayed.run_id()} in experiment {args.mlflow_experiment!r} at {args.mlflow}")
    if replayed.early is not None:
        print(_stop_line(replayed))
    return 0


# -- a directory of runs ----------------------------------------------------------------------------
def _runs(root: Path) -> list[tuple[str, Path, set[str]]]:
    """Each run under ``root``: its name, its chief's log and the keys that log's first record
    declares. Every log's first record is read, so a file that is not a log fails before any run
    is replayed."""
    from hookbus._contract._event_log import iter_event_log
    from hookbus._watch._sweep import find_runs, run_logs, run_name

    found = []
    for run in find_runs(root):
        logs = run_logs(run)
        firsts = [next(iter_event_log(log), None) for log in logs]  # not a log: raises, naming its line
        keys = set((firsts[0] or {}).get("keys") or ())
        found.append((run_name(root, run), logs[0], keys))
    return found


def _refused(args: argparse.Namespace, runs: list[tuple[str, Path, set[str]]]) -> str | None:
    """Why these options cannot replay these runs, or ``None``."""
    if args.mlflow_run_name is not None:
        return (
            f"--mlflow-run-name {args.mlflow_run_name!r} names one run; a directory of runs names each MLflow "
            "run after its run's directory (give a log to name its run)"
        )
    if args.csv is not None and args.csv.is_dir():
        return f"--csv {args.csv} is a directory; give the file to write all runs' rows to"
    # CSVSink's columns: train keys as they are, eval and test keys without their prefix.
    taken = {_RUN_COLUMN, f"eval/{_RUN_COLUMN}", f"test/{_RUN_COLUMN}"}
    clash = next((log for _, log, keys in runs if keys & taken), None)
    if args.csv is not None and clash is not None:
        return _run_column_taken(str(clash))
    return None


def _run_column_taken(where: str) -> str:
    return (
        f"--csv: {where} has a key named {_RUN_COLUMN!r}, the column that names each run in the one file; "
        "replay that run's log on its own"
    )


def _replay_runs(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    """Replay every run under the directory ``args.log``, one after another, by name."""
    import hookbus

    root: Path = args.log
    try:
        runs = _runs(root)
    except (OSError, ValueError) as error:
        print(f"hookbus replay: {error}", file=sys.stderr)
        return 2
    if not runs:
        print(
            f"hookbus replay: {root} holds no runs: no event log (*.jsonl) in it or in its subdirectories; give a "
            "log, or a directory whose runs' directories hold their logs",
            file=sys.stderr,
        )
        return 2
    if not _asked(args):
        names = ", ".join(name for name, _, _ in runs[:10]) + (", ..." if len(runs) > 10 else "")
        print(
            f"hookbus replay: nothing asked for; {root} holds {len(runs)} runs ({names}). Give one or more of:\n"
            + _OPTIONS,
            file=sys.stderr,
        )
        return 2
    refused = _refused(args, runs)
    if refused is not None:
        print(f"hookbus replay: {refused}", file=sys.stderr)
        return 2
    spool = _spool(args, stack)
    rows = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hookbus-replay-csv-"))) if args.csv else None
    written: list[tuple[str, Path]] = []
    done = 0
    for index, (name, log, _) in enumerate(runs):
        try:
            records = hookbus.read_event_log(log)
            if not records:
                print(f"{name}: skipped, {log} holds no record yet")
                continue
            per_run = rows / str(index) / "metrics.csv" if rows is not None else None
            replayed = _replay_log(
                args,
                log,
                records,
                csv_path=per_run,
                tensorboard=args.tensorboard / name if args.tensorboard is not None else None,
                run_name=name,
                spool=spool,
            )
        except (OSError, ValueError, TypeError, ImportError) as error:
            print(f"hookbus replay: {name}: {error}", file=sys.stderr)
            return 2
        done += 1
        if per_run is not None:
            written.append((name, per_run))
        result = replayed.result
        print(f"{name}: replayed {result.steps} step records of {log} (last step {result.last_step})")
        problem = replayed.unshipped()
        if problem is not None:
            print(_unshipped_message(f"{name}: {problem}", "runs"), file=sys.stderr)
            return 1
        if replayed.tracker is not None:
            print(f"{name}: MLflow run {replayed.run_id()} in experiment {args.mlflow_experiment!r} at {args.mlflow}")
        if replayed.early is not None:
            print(f"{name}: {_stop_line(replayed)}")
        sys.stdout.flush()  # each run's lines as it is done: a run shipped is a run said
    if args.csv is not None:
        try:
            merged = _merge_rows(args.csv, written)
        except (OSError, ValueError) as error:
            print(f"hookbus replay: {error}", file=sys.stderr)
            return 2
        for path in merged:
            print(f"rows of {len(written)} runs: {path}")
    skipped = f" ({len(runs) - done} skipped)" if done < len(runs) else ""
    print(f"replayed {done} runs of {root}{skipped}")
    return 0


def _merge_rows(target: Path, written: list[tuple[str, Path]]) -> list[Path]:
    """Each of CSVSink's files (train, ``.eval``, ``.test``, ``.system``) the runs wrote, as one file at
    ``target``'s name with a ``run`` column first and the union of the runs' columns (first seen
    first), replaced atomically; the files written."""
    done = []
    for kind in _CSV_KINDS:
        parts = [(name, path.with_name(path.stem + kind + ".csv")) for name, path in written]
        parts = [(name, path) for name, path in parts if path.exists()]
        if not parts:
            continue
        columns: dict[str, None] = {}
        for name, path in parts:
            with path.open(newline="") as f:
                header = next(csv.reader(f), [])
            if _RUN_COLUMN in header:  # a key first seen after the log's first record
                raise ValueError(_run_column_taken(f"the run {name!r}"))
            columns.update(dict.fromkeys(header))
        out = target.with_name(target.stem + kind + ".csv")
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=out.name, suffix=".tmp", dir=out.parent)
        try:
            with os.fdopen(fd, "w", newline="") as f:
                writer = csv.DictWriter(f, [_RUN_COLUMN, *columns], restval="")
                writer.writeheader()
                for name, path in parts:
                    with path.open(newline="") as rows:
                        for row in csv.DictReader(rows):
                            writer.writerow({_RUN_COLUMN: name, **row})
            os.replace(temporary, out)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        done.append(out)
    return done
