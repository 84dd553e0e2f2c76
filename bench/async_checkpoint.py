"""Issue 30 item 4: does ``tf.train.CheckpointOptions(enable_async=True)`` take time off the training thread?

The TF2 publishers save through ``tf.train.Checkpoint.write`` (hookbus/_tf/_checkpoint_tf2.py). This
measures, per save, the synchronous ``write`` against the asynchronous one (the time until
``write`` returns, which is what training would wait for, and until ``sync()`` says the files
are complete, which is when the barrier could write the pointer), alternating the two on the
same objects, medians over the saves:

- plain ``tf.Variable`` state (a custom loop's ``tf.Module``) of three sizes;
- the Keras MLP of ``keras_overhead.py`` with its Adam optimizer. With Keras 3 on TensorFlow 2.21
  an asynchronous ``write`` of the same ``tf.train.Checkpoint`` fails on the second save (Keras's
  variables create a ``tf.Variable`` inside TensorFlow's traced copy-to-CPU function); the run
  shows it, then measures the only way round it, a new ``tf.train.Checkpoint`` per save.

Usage: ``.venv/bin/python bench/async_checkpoint.py [--saves N]``. Prints one line per case.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:8.2f} ms"


def measure(name: str, sync_ckpt: Any, async_ckpt: Callable[[], Any], step: Callable[[], None], saves: int) -> None:
    """Alternate a synchronous and an asynchronous save ``saves`` times; print the medians."""
    import tensorflow as tf

    options = tf.train.CheckpointOptions(enable_async=True)
    directory = tempfile.mkdtemp(prefix="hookbus-async-")
    plain, returned, done = [], [], []
    for i in range(saves):
        start = time.perf_counter()
        sync_ckpt.write(os.path.join(directory, f"sync-{i}"))
        plain.append(time.perf_counter() - start)
        ckpt = async_ckpt()
        start = time.perf_counter()
        ckpt.write(os.path.join(directory, f"async-{i}"), options=options)
        returned.append(time.perf_counter() - start)
        ckpt.sync()
        done.append(time.perf_counter() - start)
        step()
    print(f"{name:44s} sync write {_ms(plain)} | async: write returns {_ms(returned)}, files complete {_ms(done)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=15, help="saves per case (default 15)")
    saves = parser.parse_args().saves
    import keras
    import numpy as np
    import tensorflow as tf

    for n in (100, 1000, 4000):
        module = tf.Module()
        module.w = tf.Variable(tf.random.normal((n, n)))
        module.m = tf.Variable(tf.zeros((n, n)))
        ckpt = tf.train.Checkpoint(model=module)
        measure(
            f"tf.Module, {2 * n * n:,} floats",
            ckpt,
            lambda ckpt=ckpt: ckpt,
            lambda module=module: module.w.assign_add(tf.ones_like(module.w)),
            saves,
        )

    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(2),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    x, y = np.ones((32, 32), "float32"), np.ones((32, 2), "float32")
    model.fit(x, y, verbose=0)
    same = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    options, directory = tf.train.CheckpointOptions(enable_async=True), tempfile.mkdtemp(prefix="hookbus-async-")
    try:
        for i in range(2):
            same.write(os.path.join(directory, f"a-{i}"), options=options)
        same.sync()
        print("Keras MLP, one Checkpoint: the second asynchronous write works")
    except ValueError as error:
        print(f"Keras MLP, one Checkpoint: the second asynchronous write fails: {str(error).splitlines()[-1].strip()}")
    measure(
        "Keras MLP + Adam, a new Checkpoint per save",
        tf.train.Checkpoint(model=model, optimizer=model.optimizer),
        lambda: tf.train.Checkpoint(model=model, optimizer=model.optimizer),
        lambda: model.train_on_batch(x, y),
        saves,
    )


if __name__ == "__main__":
    main()
