"""The small classification data set the Keras tests fit on, and the warning filter they share.

Four features, two classes: the label is the sign of the first feature plus noise, so a small
model learns it within a few epochs and its metrics move (early stopping and best checkpoints
have something to decide)::

    TRAIN, VAL = data(128, 0), data(64, 1)
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

__all__ = ["KERAS_NP_ARRAY", "classifier", "data", "keras_np_array_ignored"]

# Keras's own BackupAndRestore, TensorBoard and .weights.h5 writer convert variables with
# np.array(variable), which numpy 2.4 warns about (warnings are errors here); only the tests
# that run those callbacks ignore it.
_NP_ARRAY_MESSAGE = "__array__ implementation doesn't accept a copy keyword"
KERAS_NP_ARRAY = pytest.mark.filterwarnings(f"ignore:{_NP_ARRAY_MESSAGE}:DeprecationWarning")


@contextlib.contextmanager
def keras_np_array_ignored() -> Iterator[None]:
    """``KERAS_NP_ARRAY``'s filter as a context: for a module-scoped fixture that runs those
    callbacks once for several tests, whichever test happens to set it up."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _NP_ARRAY_MESSAGE, DeprecationWarning)
        yield


def data(n: int = 64, seed: int = 0) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``n`` examples from a generator seeded with ``seed``: float32 features, int32 labels."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = ((x[:, 0] + rng.normal(scale=0.8, size=n)) > 0).astype("int32")
    return x, y


def classifier(optimizer: Any, metrics: Sequence[Any] = ()) -> Any:
    """The model the Keras tests fit on :func:`data`: ``Dense(8, relu)`` then two logits, seeded
    with 0, compiled with ``optimizer``, sparse cross-entropy on the logits and ``metrics``."""
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    m.compile(optimizer=optimizer, loss=loss, **({"metrics": list(metrics)} if metrics else {}))
    return m
