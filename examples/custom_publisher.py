"""A publisher for another framework's loop, in one file: plain NumPy SGD on every hookbus sink.

It needs no TensorFlow: the loop below is the "framework", and :class:`NumpyPublisher` is
everything hookbus needs from it — how to count steps, how to hand over values, and how to save
and restore its model (:class:`NpzBackend`, its files kept by a
:class:`hookbus.publisher_api.FileCheckpointStore`).
Planning, schedules, stops, signals, the checkpoint barrier and the sinks' lifecycle are
:class:`hookbus.publisher_api.PublisherCore`'s (everything a publisher author needs is in
:mod:`hookbus.publisher_api`). From the repository root, after the README's first command::

    .venv/bin/python examples/custom_publisher.py [--steps 2000] [--dir runs/custom-publisher]

Run it again with the same ``--dir`` and it resumes from its last checkpoint (killed or not):
the model, its data stream and the sinks' states (CSV position, early stopping's patience) come
back, so each CSV row is written once and the run ends as an uninterrupted one would.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

import hookbus
from hookbus.publisher_api import FileCheckpointStore, PublisherCore
from hookbus.sinks import CheckpointSink, CSVSink, EarlyStoppingSink, NanGuardSink, StopAtStepSink

#: Where this publisher's checkpoints live: ``<prefix>.npz`` files, a JSON pointer beside them.
STORE = FileCheckpointStore(".npz")


class Model:
    """Linear regression trained by SGD: the weights, the step, and the stream its batches come from."""

    def __init__(self, features: int, seed: int) -> None:
        self.w = np.zeros(features)
        self.step = 0
        self.rng = np.random.default_rng(seed)


class NpzBackend:
    """A :class:`hookbus.publisher_api.CheckpointBackend`: saves and restores a :class:`Model` as one ``.npz`` file."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.live = False  # a model to save exists between the publisher's begin and end

    @property
    def ready(self) -> bool:
        return self.live

    def save(self, path: str) -> str:
        model = self.model
        # The marker file appears whole or not at all: written beside it, then renamed.
        temp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.npz.tmp")
        with open(temp, "wb") as file:
            np.savez(file, w=model.w, step=model.step, rng=json.dumps(model.rng.bit_generator.state))
        os.replace(temp, path + STORE.marker)
        return path

    def restore(self, path: str) -> None:
        with np.load(path + STORE.marker) as saved:
            self.model.w = saved["w"].copy()
            self.model.step = int(saved["step"])
            self.model.rng.bit_generator.state = json.loads(str(saved["rng"]))


class NumpyPublisher:
    """Publishes a hand-written loop's steps and evaluations on a bus, and checkpoints its model."""

    def __init__(self, bus: hookbus.EventBus, model: Model, keys: list[str], eval_keys: list[str]) -> None:
        self.train = PublisherCore(bus, keys)  # declares the keys: checked at begin
        self.eval = PublisherCore(bus, eval_keys, mode="eval")  # published as eval/<key>
        self.model = model
        self.backend = NpzBackend(model)
        self.train.offer_checkpoints(self.backend, STORE)  # CheckpointSink saves through these

    def begin(self, restore_from: str | os.PathLike[str] | None = None) -> int | None:
        """Begin, restoring the latest checkpoint in ``restore_from`` if there is one; its step, or ``None``."""
        self.train.begin()  # sinks begin: the checkpoint sink prunes and checks what it finds
        self.backend.live = True
        latest = STORE.checkpoints(os.path.abspath(restore_from)) if restore_from is not None else []
        if latest:
            self.backend.restore(latest[-1])
        # A resume point: sinks drop what came after this step and load their states saved with it.
        self.train.session_created(self.model.step, restored=bool(latest))
        return self.model.step if latest else None

    def after_step(self, values: Callable[[], Mapping[str, float]]) -> bool:
        """One step ran; ``values`` is called only when a subscriber is due. Returns: stop now?"""
        self.model.step += 1
        step = self.model.step
        plan = self.train.plan(step)
        if plan is None:
            self.train.advance(step)  # nothing due: no values computed, nothing sent
        else:
            got = values()
            self.train.publish_step(plan, step, {k: got[k] for k in plan.keys})
        return self.train.should_stop()

    def evaluated(self, values: Mapping[str, float]) -> bool:
        """An evaluation at the current step; returns: stop now? (early stopping decides here)."""
        self.eval.publish_eval(self.model.step, values)
        return self.eval.should_stop()

    def should_stop(self) -> bool:
        return self.train.should_stop()

    def end(self) -> None:
        self.train.end(self.model.step)  # the checkpoint sink's final save happens in here
        self.backend.live = False


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
    bus.attach(CheckpointSink(args.dir / "ckpt", every_n_steps=500, keep=3))
    bus.attach(NanGuardSink("loss"))
    bus.attach(EarlyStoppingSink("eval/loss", patience=3, min_delta=1e-6))
    bus.attach(StopAtStepSink(last_step=args.steps))
    model = Model(features=3, seed=1)
    publisher = NumpyPublisher(bus, model, keys=["loss"], eval_keys=["loss"])

    with bus:
        resumed = publisher.begin(restore_from=args.dir / "ckpt")
        if resumed is not None:
            print(f"resumed from step {resumed}")
        while not publisher.should_stop():
            x = model.rng.normal(size=(32, 3))
            y = x @ true_w + 0.1 * model.rng.normal(size=32)
            error = x @ model.w - y
            model.w -= 0.05 * (2 / len(y)) * (x.T @ error)
            if publisher.after_step(lambda error=error: {"loss": float(np.mean(error**2))}):
                break
            held_loss = float(np.mean((held_x @ model.w - held_y) ** 2)) if model.step % 200 == 0 else None
            if held_loss is not None and publisher.evaluated({"loss": held_loss}):
                break
        publisher.end()
    print(f"stopped at step {model.step}: {bus.stop_reason}")
    print(f"metrics: {args.dir / 'metrics.csv'}; checkpoints: {args.dir / 'ckpt'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
