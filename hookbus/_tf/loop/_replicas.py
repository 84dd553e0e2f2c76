"""Per-replica values (what ``strategy.run`` returns), published as their mean across replicas.

A ``tf.distribute`` strategy's ``run`` returns one value per replica (a ``PerReplica``; a
``Mirrored`` when every replica holds the same). No sink can use such a value, and dropping it
would hide what a subscriber asked for (a NaN on one replica, above all), so the loop publisher
turns it into one value on due steps only: the mean across replicas, computed on the host as
``strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)`` computes it (the replicas'
values summed in their dtype, in replica order, then divided by the number of replicas; integers
and booleans averaged as floats). Under a multi-worker strategy the mean of this worker's
replicas is not the global one, and a cross-worker reduce on due steps only could leave a worker
waiting in an all-reduce its peers never join: there such values are refused, naming
``strategy.reduce``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from hookbus._rules._values import is_real_dtype

__all__ = ["ReplicaValues", "replica_mean"]


def replica_mean(key: str, parts: Sequence[Any]) -> Any:
    """The mean of the replicas' values ``parts`` (numpy values), as ``strategy.reduce(MEAN)`` makes it.

    Floating values are summed in their own dtype in replica order and divided by the count in
    that dtype (so a float32 mean is the float32 TensorFlow computes, and a NaN or inf on any
    replica stays in the mean); integers and booleans are averaged as float64.

    Raises:
        TypeError: for values of a dtype that has no mean (strings, objects, complex).
        ValueError: when the replicas' values differ in shape (a mean needs one shape).
    """
    arrays = [np.asarray(p) for p in parts]
    shapes = sorted({a.shape for a in arrays})
    if len(shapes) > 1:
        raise ValueError(
            f"per-replica value of key {key!r} has a different shape on each replica {shapes}; "
            "the mean across replicas needs one shape: reduce it yourself with strategy.reduce(..., axis=0)"
        )
    dtype = arrays[0].dtype
    if not is_real_dtype(dtype) or any(a.dtype != dtype for a in arrays):
        raise TypeError(
            f"per-replica value of key {key!r} has dtype {dtype} ({sorted({str(a.dtype) for a in arrays})} "
            "across replicas), which has no mean; publish numbers, or reduce it yourself with strategy.reduce"
        )
    if dtype.kind in "biu":
        return np.mean(np.stack(arrays), axis=0)
    total = arrays[0]
    for part in arrays[1:]:
        total = total + part
    return total / np.asarray(len(arrays), dtype=dtype)


def _distributed_values(value: Any) -> bool:
    # A distributed value exists only once TensorFlow is imported: asking sys.modules never
    # imports it (a loop that publishes plain numbers runs without TensorFlow).
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(value, tf.distribute.DistributedValues)


class ReplicaValues:
    """How the loop publisher converts a value it is handed, on a due step.

    Tensors and variables through ``.numpy()`` (the one device-to-host copy; numpy 2.4 warns on
    a ``tf.Variable``'s ``__array__``), per-replica values to their mean across replicas
    (:func:`replica_mean`) when a strategy is given, anything else as it is (the publisher's
    core checks that sinks can use it).

    Args:
        strategy: The ``tf.distribute`` strategy the values come from, or ``None``.
    """

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy
        #: Set at begin: whether the strategy spans several workers (then per-replica values are refused).
        self.multi_worker = False

    def convert(self, key: str, value: Any, step: int) -> Any:
        """``value`` at training ``step`` as the publisher's core takes it (see the class)."""
        numpy = getattr(value, "numpy", None)
        if callable(numpy):
            return numpy()
        if not _distributed_values(value):
            return value
        kind = type(value).__name__
        if self.strategy is None:
            raise TypeError(
                f"value of key {key!r} at step {step} is a {kind} (one value per replica, from strategy.run); pass "
                "LoopPublisher(strategy=...) to publish their mean across replicas, or reduce them "
                "with strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)"
            )
        if self.multi_worker:
            raise TypeError(
                f"value of key {key!r} at step {step} is a {kind} under a multi-worker strategy: this worker's "
                "replicas are not all of them, so their mean is not the run's; reduce it across workers with "
                "strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None) in the step every worker runs"
            )
        parts = self.strategy.experimental_local_results(value)
        return replica_mean(key, [p.numpy() if callable(getattr(p, "numpy", None)) else p for p in parts])
