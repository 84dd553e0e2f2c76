"""The ``hookbus`` command: ``hookbus demo`` trains the seed's model with every sink attached.

A bare ``hookbus`` prints this help on stderr and exits with status 2, as argparse does for any
other missing argument; ``hookbus --help`` prints it on stdout and exits 0.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hookbus._cli._arguments import positive_int
from hookbus._cli._replay import add_replay, replay_command
from hookbus._cli._startup_notices import held_startup_notices
from hookbus._rules._files import make_writable_dir
from hookbus._rules._validate import non_negative_seconds
from hookbus._tf._import import require_tensorflow

__all__ = ["main"]


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
    commands.add_parser(
        "docs",
        help="say where the guides and the reference are, and how to read the site locally",
        description="The guides and the API reference are a documentation site (MkDocs) built from a "
        "checkout's docs/ and mkdocs.yml: this says how to serve or build it, and where a build is.",
    )
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
    demo.add_argument("--steps", type=positive_int, default=4000, help="last step at the latest (default 4000)")
    demo.add_argument("--eval-every", type=positive_int, default=200, help="steps between evaluations (default 200)")
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
    add_replay(commands)
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
    from hookbus._cli._demo import DEMO_BATCH, build_demo_regression
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
        # The options that shape the training, as its hyper-parameters: runs of a sweep launched with
        # different ones differ by them in `hookbus watch DIR` and TensorBoard's HParams dashboard.
        hparams = {"steps": steps, "eval_every": eval_every, "patience": patience, "reduce_lr": reduce_lr}
        bus.attach(ConsoleSink(run_name=f"demo · {logdir}"))
        bus.attach(TensorBoardSink(str(logdir / "tb"), every_n_steps=50, hparams=hparams))
        bus.attach(CSVSink(str(logdir / "metrics.csv"), every_n_steps=10))
        bus.attach(CheckpointSink(ckpt, every_n_steps=eval_every, keep=3))
        # The evaluation loss flattens near 0.02 (the label noise): improvements under 0.001 are noise.
        bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=patience, min_delta=1e-3))
        if reduce_lr > 0:
            bus.attach(ReduceLROnPlateauSink(monitor="eval/loss", factor=0.5, patience=reduce_lr, min_delta=1e-3))
        bus.attach(NanGuardSink("loss"))
        bus.attach(StopAtStepSink(last_step=steps))
        bus.attach(EventLogSink(str(logdir / "events.jsonl"), hparams=hparams))  # what `hookbus replay` reads
        train = hookbus.EventBusHook(
            bus,
            fetches={"loss": model.loss, "accuracy": "accuracy:0"},
            train_op=model.train_op,
            learning_rate=model.learning_rate,
            batch_size=DEMO_BATCH,  # drawn anew each step, not from an input pipeline whose shape says it
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
    if args.command == "docs":
        from hookbus._cli._docs import docs_text

        print(docs_text(), end="")
        return 0
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


if __name__ == "__main__":
    sys.exit(main())
