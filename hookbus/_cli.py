"""The ``hookbus`` command: ``hookbus demo`` trains the seed's model with every sink attached."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hookbus._startup_notices import held_startup_notices
from hookbus._tf import require_tensorflow
from hookbus._validate import non_negative_seconds

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
    parser = argparse.ArgumentParser(prog="hookbus", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="train the seed's linear regression on built-in synthetic data with every sink attached",
        description="Train a linear regression on synthetic data under MonitoredTrainingSession, "
        "evaluate it from each checkpoint, and show it live; TensorBoard, CSV and checkpoints go to "
        "--logdir. Run it again with the same --logdir to resume.",
    )
    demo.add_argument("--logdir", type=Path, default=None, help="output folder (default: runs/demo-<time>)")
    demo.add_argument("--steps", type=_positive_int, default=4000, help="stop at this step (default 4000)")
    demo.add_argument("--eval-every", type=_positive_int, default=500, help="steps between evaluations (default 500)")
    demo.add_argument("--patience", type=int, default=2, help="early-stopping patience on eval/loss (default 2)")
    demo.add_argument(
        "--delay", type=_non_negative_float, default=0.002, help="sleep per step, to watch it (default 0.002 s)"
    )
    return parser


def demo(logdir: Path, *, steps: int, eval_every: int, patience: int, delay: float) -> int:
    """Run the demo; returns the process exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # TensorFlow's oneDNN notice ignores TF_CPP_MIN_LOG_LEVEL (see _startup_notices): hold it
    # back so the dashboard starts on a clean screen; warnings and errors still come through.
    with held_startup_notices():
        tf = require_tensorflow("hookbus demo")

    import hookbus
    from hookbus._demo import build_linear_regression
    from hookbus.sinks import (
        CheckpointSink,
        ConsoleSink,
        CSVSink,
        EarlyStoppingSink,
        NanGuardSink,
        StopAtStepSink,
        TensorBoardSink,
    )

    tf.compat.v1.disable_eager_execution()
    # TensorFlow's own restore path logs deprecation notices for its v1 API; not the demo's news.
    tf.get_logger().setLevel("ERROR")
    ckpt = str(logdir / "ckpt")
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(ConsoleSink(run_name=f"demo · {logdir}"))
        bus.attach(TensorBoardSink(str(logdir / "tb"), every_n_steps=50))
        bus.attach(CSVSink(str(logdir / "metrics.csv"), every_n_steps=10))
        bus.attach(CheckpointSink(ckpt, every_n_steps=eval_every, keep=3))
        bus.attach(EarlyStoppingSink(monitor="eval/loss", patience=patience, min_delta=1e-5))
        bus.attach(NanGuardSink("loss"))
        bus.attach(StopAtStepSink(last_step=steps))
        train = hookbus.EventBusHook(
            bus, fetches={"loss": model.loss, "accuracy": "accuracy:0"}, train_op=model.train_op
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
    print(f"stopped after {rounds} evaluation(s): {bus.stop_reason or 'no stop requested'}")
    print(f"metrics: {logdir / 'metrics.csv'}   checkpoints: {ckpt}")
    print(f"open in TensorBoard: tensorboard --logdir {logdir / 'tb'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hookbus`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        logdir = args.logdir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
        try:
            return demo(logdir, steps=args.steps, eval_every=args.eval_every, patience=args.patience, delay=args.delay)
        except KeyboardInterrupt:
            print(
                f"interrupted; the files and the last checkpoint are in {logdir}. Resume with: "
                f"{Path(sys.argv[0]).name} demo --logdir {logdir}",
                file=sys.stderr,
            )
            return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
