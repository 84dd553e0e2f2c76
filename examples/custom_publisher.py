"""A publisher for another framework's loop, in one file: plain NumPy SGD on every hookbus sink.

It needs no TensorFlow: the loop below is the "framework", and :class:`NumpyPublisher` is
everything hookbus needs from it — how to count steps and how to hand over values. Planning,
schedules, stops, signals and the sinks' lifecycle are :class:`hookbus.PublisherCore`'s. From
the repository root, after the README's first command::

    .venv/bin/python examples/custom_publisher.py [--steps 2000] [--dir runs/custom-publisher]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

import hookbus
from hookbus.sinks import CSVSink, EarlyStoppingSink, NanGuardSink, StopAtStepSink


class NumpyPublisher:
    """Publishes a hand-written loop's steps and evaluations on a bus."""

    def __init__(self, bus: hookbus.EventBus, keys: list[str], eval_keys: list[str]) -> None:
        self.train = hookbus.PublisherCore(bus, keys)  # declares the keys: checked at begin
        self.eval = hookbus.PublisherCore(bus, eval_keys, mode="eval")  # published as eval/<key>
        self.step = 0

    def begin(self, step: int = 0) -> None:
        self.train.begin()
        self.train.session_created(step)  # a resume point: sinks drop what came after `step`
        self.step = step

    def after_step(self, values: Callable[[], Mapping[str, float]]) -> bool:
        """One step ran; ``values`` is called only when a subscriber is due. Returns: stop now?"""
        self.step += 1
        plan = self.train.plan(self.step)
        if plan is None:
            self.train.advance(self.step)  # nothing due: no values computed, nothing sent
        else:
            got = values()
            self.train.publish_step(plan, self.step, {k: got[k] for k in plan.keys})
        return self.train.should_stop()

    def evaluated(self, values: Mapping[str, float]) -> bool:
        """An evaluation at the current step; returns: stop now? (early stopping decides here)."""
        self.eval.publish_eval(self.step, values)
        return self.eval.should_stop()

    def end(self) -> None:
        self.train.end(self.step)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dir", type=Path, default=Path("runs/custom-publisher"))
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    true_w = rng.normal(size=3)
    held_x = rng.normal(size=(256, 3))
    held_y = held_x @ true_w

    bus = hookbus.EventBus()
    bus.attach(CSVSink(args.dir / "metrics.csv", every_n_steps=50))
    bus.attach(NanGuardSink("loss"))
    bus.attach(EarlyStoppingSink("eval/loss", patience=3, min_delta=1e-6))
    bus.attach(StopAtStepSink(last_step=args.steps))
    publisher = NumpyPublisher(bus, keys=["loss"], eval_keys=["loss"])

    w = np.zeros(3)
    with bus:
        publisher.begin()
        while True:
            x = rng.normal(size=(32, 3))
            y = x @ true_w + 0.1 * rng.normal(size=32)
            error = x @ w - y
            w -= 0.05 * (2 / len(y)) * (x.T @ error)
            if publisher.after_step(lambda error=error: {"loss": float(np.mean(error**2))}):
                break
            held_loss = float(np.mean((held_x @ w - held_y) ** 2)) if publisher.step % 200 == 0 else None
            if held_loss is not None and publisher.evaluated({"loss": held_loss}):
                break
        publisher.end()
    print(f"stopped at step {publisher.step}: {bus.stop_reason}")
    print(f"metrics: {args.dir / 'metrics.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
