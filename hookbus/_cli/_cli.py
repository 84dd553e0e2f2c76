"""The ``hookbus`` command: ``hookbus demo`` trains the seed's model with every sink attached.

A bare ``hookbus`` prints this help on stderr and exits with status 2, as argparse does for any
other missing argument; ``hookbus --help`` prints it on stdout and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hookbus._cli._startup_notices import held_startup_notices
from hookbus._rules._files import make_writable_dir
from hookbus._rules._validate import non_negative_seconds
from hookbus._tf._import import require_tensorflow

__all__ = ["main"]


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive int (got {text})")
    return value


def _non_negative_float(text: str) -> float:
    try:  # the one check for durations (inf and nan fail there, not as time.sleep's OverflowError)
        return non_negative_seconds("--delay", float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0 (got {text})") from None


def _parser() -> argparse.ArgumentParser:
    from hookbus import __version__

    parser = argparse.ArgumentParser(
        prog="hookbus",
        description="TensorFlow training made observable through one event bus.",
        epilog="A bare `hookbus` prints this help and exits with status 2 (a missing command).",
    )
    parser.add_argument("--version", action="version", version=f"hookbus {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="train the seed's linear regression on built-in synthetic data with every sink attached",
        description="Train a linear regression on synthetic data under MonitoredTrainingSession, "
        "evaluate it from each checkpoint, and show it live; TensorBoard, CSV, checkpoints and the event "
        "log (events.jsonl, for `hookbus replay`) go to --logdir. The loss falls over the first "
        "thousand steps or so, evaluation flattens after that, and early stopping ends the run when "
        "it stops improving. Run it again with the same --logdir to resume.",
    )
    demo.add_argument("--logdir", type=Path, default=None, help="output folder (default: runs/demo-<time>)")
    demo.add_argument("--steps", type=_positive_int, default=4000, help="last step at the latest (default 4000)")
    demo.add_argument("--eval-every", type=_positive_int, default=200, help="steps between evaluations (default 200)")
    demo.add_argument("--patience", type=int, default=3, help="early-stopping patience on eval/loss (default 3)")
    demo.add_argument(
        "--reduce-lr",
        type=int,
        default=0,
        metavar="PATIENCE",
        help="halve the learning rate after PATIENCE evaluations without improvement (ReduceLROnPlateauSink; "
        "default 0: off)",
    )
    demo.add_argument(
        "--delay", type=_non_negative_float, default=0.004, help="sleep per step, to watch it (default 0.004 s)"
    )
    _add_replay(commands)
    from hookbus._watch._command import add_watch  # it wires the console sink: loaded with the command

    add_watch(commands)
    return parser


def _command(name: str) -> str:
    """How to type the console script ``name`` installed beside this Python (a venv's bin/), so a
    hint works as printed without an activated venv; the bare name when it is not there."""
    path = Path(sys.executable).parent / name  # not resolved: a venv's python is a symlink
    if not path.exists():
        return name
    try:
        shown = str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        shown = str(path.absolute())
    return shlex.quote(shown)


def _writable(logdir: Path) -> str | None:
    """Why the demo cannot write in ``logdir`` (made if missing), or ``None`` when it can."""
    try:
        make_writable_dir(logdir)  # what each writer sink's begin does, once, before TensorFlow loads
    except OSError as error:
        return error.strerror or str(error)
    return None


def demo(logdir: Path, *, steps: int, eval_every: int, patience: int, delay: float, reduce_lr: int = 0) -> int:
    """Run the demo; returns the process exit status."""
    problem = _writable(logdir)
    if problem is not None:  # one line, before TensorFlow loads and every sink fails on its own
        print(f"hookbus demo: cannot write in --logdir {shlex.quote(str(logdir))}: {problem}", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # TensorFlow's oneDNN notice ignores TF_CPP_MIN_LOG_LEVEL (see _startup_notices): hold it
    # back so the dashboard starts on a clean screen; warnings and errors still come through.
    with held_startup_notices():
        tf = require_tensorflow("hookbus demo")

    import hookbus
    from hookbus._cli._demo import build_demo_regression
    from hookbus.sinks import (
        CheckpointSink,
        ConsoleSink,
        CSVSink,
        EarlyStoppingSink,
        EventLogSink,
        NanGuardSink,
        ReduceLROnPlateauSink,
        StopAtStepSink,
        TensorBoardSink,
    )

    tf.compat.v1.disable_eager_execution()
    # TensorFlow's own restore path logs deprecation notices for its v1 API; not the demo's news.
    tf.get_logger().setLevel("ERROR")
    ckpt = str(logdir / "ckpt")
    with tf.Graph().as_default():
        model = build_demo_regression(rate_variable=reduce_lr > 0)
        bus = hookbus.EventBus()
        bus.attach(ConsoleSink(run_name=f"demo · {logdir}"))
        bus.attach(TensorBoardSink(str(logdir / "tb"), every_n_steps=50))
        bus.attach(CSVSink(str(logdir / "metrics.csv"), every_n_steps=10))
        bus.attach(CheckpointSink(ckpt, every_n_steps=eval_every, keep=3))
        # The evaluation loss flattens near 0.02 (the label noise): improvements under 0.001 are noise.
        bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=patience, min_delta=1e-3))
        if reduce_lr > 0:
            bus.attach(ReduceLROnPlateauSink(monitor="eval/loss", factor=0.5, patience=reduce_lr, min_delta=1e-3))
        bus.attach(NanGuardSink("loss"))
        bus.attach(StopAtStepSink(last_step=steps))
        bus.attach(EventLogSink(str(logdir / "events.jsonl")))  # what `hookbus replay` reads
        train = hookbus.EventBusHook(
            bus,
            fetches={"loss": model.loss, "accuracy": "accuracy:0"},
            train_op=model.train_op,
            learning_rate=model.learning_rate,
        )
        evaluate = hookbus.EventBusHook(
            bus, fetches={"loss": model.eval_loss, "accuracy": model.eval_accuracy}, mode="eval"
        )

        def run_step(session: object) -> None:
            session.run(model.train_op)  # type: ignore[attr-defined]
            if delay:
                time.sleep(delay)

        with bus:
            rounds = hookbus.train_and_evaluate(
                bus,
                train_op=model.train_op,
                eval_fetches=[model.eval_loss, model.eval_accuracy],
                checkpoint_dir=ckpt,
                steps_per_round=eval_every,
                train_hooks=[train],
                eval_hooks=[evaluate],
                eval_steps=1,
                run_step=run_step,
            )
    print(f"ended after {rounds} evaluation(s): {bus.stop_reason or 'its last step'}")  # the word is the summary's
    print(f"metrics: {logdir / 'metrics.csv'}   checkpoints: {ckpt}   event log: {logdir / 'events.jsonl'}")
    print(f"open in TensorBoard: {_command('tensorboard')} --logdir {shlex.quote(str(logdir / 'tb'))}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hookbus`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "replay":
        return replay_command(args)
    if args.command == "watch":
        from hookbus._watch._command import watch_command

        return watch_command(args)
    if args.command == "demo":
        logdir = args.logdir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
        try:
            return demo(
                logdir,
                steps=args.steps,
                eval_every=args.eval_every,
                patience=args.patience,
                delay=args.delay,
                reduce_lr=args.reduce_lr,
            )
        except KeyboardInterrupt:
            print(
                f"interrupted; the files and the last checkpoint are in {logdir}. Resume with: "
                f"{_command('hookbus')} demo --logdir {shlex.quote(str(logdir))}",
                file=sys.stderr,
            )
            return 130
    return 2


def _add_replay(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replay = commands.add_parser(
        "replay",
        help="rebuild outputs from a run recorded by EventLogSink, or try a stop rule on it",
        description="Feed a recorded run (an EventLogSink log) to new sinks with the schedules given "
        "here: --csv and --tensorboard rebuild those outputs; --early-stopping prints where that rule "
        "would have stopped the run. Only steps the log holds can be replayed.",
    )
    replay.add_argument("log", type=Path, help="the event log (EventLogSink's file)")
    replay.add_argument("--csv", type=Path, default=None, help="write CSVSink's files here")
    replay.add_argument(
        "--csv-every-n-steps", type=_positive_int, default=10, help="CSV rows every n steps (default 10, as CSVSink)"
    )
    replay.add_argument("--tensorboard", type=Path, default=None, help="write TensorBoardSink's event files here")
    replay.add_argument(
        "--tensorboard-every-n-steps",
        type=_positive_int,
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
    replay.add_argument("--mlflow-run-name", default=None, help="its MLflow run name (default: MLflow picks one)")


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


def _nothing_to_do(log: Path, records: list[dict[str, Any]]) -> str:
    """What ``hookbus replay LOG`` without an output option prints: what the log holds, what to ask."""
    steps = [r["step"] for r in records if r["record"] == "step"]
    keys = sorted({k for r in records if r["record"] == "begin" for k in r.get("keys", ())})
    held = f"{len(steps)} step records" + (f" up to step {max(steps)}" if steps else "")
    if keys:
        held += f" (keys: {', '.join(keys)})"
    return (
        f"hookbus replay: nothing asked for; {log} holds {held}. Give one or more of:\n"
        "  --csv FILE             rebuild CSVSink's files (FILE and its .eval.csv)\n"
        "  --tensorboard DIR      rebuild TensorBoardSink's event files in DIR\n"
        '  --early-stopping SPEC  say where a stop rule would have stopped it, e.g. "monitor=eval/loss,patience=5"\n'
        "  --mlflow URI           upload it to an MLflow tracking server or store (once, however often run)"
    )


def replay_command(args: argparse.Namespace) -> int:
    """``hookbus replay``: returns the process exit status."""
    with contextlib.ExitStack() as stack:  # what the upload needs until it is done
        return _replay(args, stack)


def _replay(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    import hookbus

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with held_startup_notices():
        if args.tensorboard is not None and importlib.util.find_spec("tensorflow") is not None:
            require_tensorflow("hookbus replay")  # TensorBoard's writer imports it: its notices are held here
        from hookbus.sinks import CSVSink, EarlyStoppingSink, TensorBoardSink
    try:
        records = hookbus.read_event_log(args.log)
        if args.csv is None and args.tensorboard is None and args.early_stopping is None and args.mlflow is None:
            print(_nothing_to_do(args.log, records), file=sys.stderr)
            return 2
        hparams = next((r["hparams"] for r in records if r["record"] == "begin" and r.get("hparams")), None)
        bus = hookbus.EventBus()
        if args.csv is not None:
            bus.attach(CSVSink(args.csv, every_n_steps=args.csv_every_n_steps, system=args.system))
        if args.tensorboard is not None:
            bus.attach(
                TensorBoardSink(
                    args.tensorboard,
                    every_n_steps=args.tensorboard_every_n_steps,
                    hparams=hparams,
                    system=args.system,
                )
            )
        tracker = None
        if args.mlflow is not None:
            # The sink's own files (its spool, its run's id) live for this upload only: the log is
            # the source, and an upload run again adds only what the run lacks (continue_ended).
            spool = stack.enter_context(tempfile.TemporaryDirectory(prefix="hookbus-replay-"))
            from hookbus._publishing._replay import recorded_run_key
            from hookbus.sinks import MLflowSink

            tracker = bus.attach(
                MLflowSink(
                    args.mlflow,
                    experiment=args.mlflow_experiment,
                    run_name=args.mlflow_run_name,
                    hparams=hparams,
                    every_n_steps=1,
                    run_key=recorded_run_key(records),
                    continue_ended=True,
                    directory=spool,
                    system=args.system,
                )
            )
        early = None
        if args.early_stopping is not None:
            early = bus.attach(EarlyStoppingSink(**_spec(args.early_stopping)))
        result = hookbus.replay(args.log, bus)
    except (OSError, ValueError, TypeError, ImportError) as error:
        print(f"hookbus replay: {error}", file=sys.stderr)
        return 2
    print(f"replayed {result.steps} step records of {args.log} (last step {result.last_step})")
    shipped = tracker.writer_stats() if tracker is not None else None
    if shipped is not None and shipped.unreachable is not None:
        print(
            f"hookbus replay: the MLflow upload did not complete: {shipped.unreachable}; run it again once MLflow "
            "answers (it adds only what the run lacks)",
            file=sys.stderr,
        )
        return 1
    if tracker is not None:
        run_id = tracker.run.run_id if tracker.run is not None else None
        print(f"MLflow run {run_id} in experiment {args.mlflow_experiment!r} at {args.mlflow}")
    if early is not None:
        if result.stopped:
            print(f"{early.name} would have stopped at step {result.stop_step}: {result.stop_reason}")
        else:
            print(f"{early.name} would not have stopped: the log ends at step {result.last_step} ({early.status()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
