"""The arguments an :class:`hookbus.EventBusHook` takes, checked at construction (before any graph).

Each check raises with the value it got and what was expected; the graph elements themselves
(names not in the graph, elements of another graph) are checked in ``begin``
(:func:`hookbus._tf._elements.resolve`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hookbus._contract._cluster import Task
from hookbus._contract._learning_rate import LEARNING_RATE_KEY
from hookbus._rules._validate import positive_int
from hookbus._tf._learning_rate_tf import GraphRate, check_rate_argument

__all__ = ["check_fetches", "check_run_arguments", "check_task"]


def check_fetches(
    tf: Any, fetches: Mapping[str, Any] | None, *, mode: object, learning_rate: Any
) -> tuple[dict[str, Any], GraphRate | None]:
    """The hook's fetches (``None``: none) and the rate it offers (``None``: no ``learning_rate``).

    Raises:
        ValueError: a ``learning_rate`` in eval mode, or beside a fetch named ``learning_rate``.
        TypeError: ``fetches`` not a mapping, or a value not a tensor, operation, variable or name.
    """
    if fetches is None:
        fetches = {}
    graph_rate = None if check_rate_argument(learning_rate) is None else GraphRate(learning_rate)
    if graph_rate is not None and (mode == "eval" or LEARNING_RATE_KEY in fetches):
        raise ValueError(
            f"learning_rate takes mode='train' and no fetches key {LEARNING_RATE_KEY!r} (it publishes that key)"
        )
    if not isinstance(fetches, Mapping):
        raise TypeError(f"fetches must be a mapping of key to tensor or tensor name (got {fetches!r})")
    for key, value in fetches.items():
        if not isinstance(value, str | tf.Tensor | tf.Operation | tf.Variable):
            raise TypeError(
                f"fetches[{key!r}] must be a tensor, an operation, a variable or a tensor name (got {value!r})"
            )
    return dict(fetches), graph_rate


def check_run_arguments(
    tf: Any,
    mode: str,
    *,
    train_op: Any,
    steps_per_run: int | None,
    batch_size: Any,
    fetches: Mapping[str, Any],
    final_fetches: Iterable[str],
) -> tuple[int | None, tuple[str, ...]]:
    """``steps_per_run`` and the ``final_fetches`` keys, checked against ``mode`` (a checked mode) and
    ``fetches``; ``train_op`` and ``batch_size`` are checked only against the mode here.

    Raises:
        ValueError: an argument of the other mode, a ``steps_per_run`` or train-mode ``batch_size``
            not a positive int, a final fetch not in ``fetches``.
        TypeError: an eval ``batch_size`` not a tensor or tensor name.
    """
    if mode == "eval" and train_op is not None:
        raise ValueError("an eval EventBusHook takes no train_op: evaluation runs are not training steps")
    if steps_per_run is not None:
        steps_per_run = positive_int("steps_per_run", steps_per_run)
        if mode == "eval":
            raise ValueError("steps_per_run counts training steps: it takes mode='train'")
    if batch_size is not None and mode != "eval":
        if isinstance(batch_size, str | tf.Tensor | tf.Variable):
            raise ValueError(
                f"a train-mode batch_size is the examples each training step takes, an int (got {batch_size!r}): a "
                "tensor would be read at every step; batch_size weights evaluation means as a tensor in mode='eval'"
            )
        positive_int("batch_size", batch_size)
    elif batch_size is not None and not isinstance(batch_size, str | tf.Tensor | tf.Variable):
        raise TypeError(f"batch_size must be a tensor or a tensor name (got {batch_size!r})")
    final = (final_fetches,) if isinstance(final_fetches, str) else tuple(final_fetches)
    unknown = [k for k in final if k not in fetches]
    if unknown:
        raise ValueError(f"final_fetches names {unknown[0]!r}, which is not in fetches {sorted(fetches)}")
    return steps_per_run, final


def check_task(task: object) -> Task | None:
    """The hook's :class:`hookbus.Task`: ``task``, or read from ``TF_CONFIG`` when ``None`` (``None``
    again without it: one machine).

    Raises:
        TypeError: ``task`` neither a ``Task`` nor ``None``.
    """
    if task is None:
        return Task.from_tf_config()
    if not isinstance(task, Task):
        raise TypeError(f"task must be a hookbus.Task or None (got {task!r})")
    return task


def static_batch_size(tf: Any, graph: Any) -> int | None:
    """The examples each training step takes, where the graph says so: the static first dimension
    shared by every output of its one input iterator's ``IteratorGetNext`` (a ``tf.data`` input batched
    with ``drop_remainder=True``, whose every batch is that size); ``None`` where there is not exactly one
    such op, or its outputs' first dimension is unknown (a last batch may be short) or differs."""
    ops = [op for op in graph.get_operations() if op.type in ("IteratorGetNext", "IteratorGetNextSync")]
    if len(ops) != 1:
        return None
    sizes = set()
    for output in ops[0].outputs:
        shape = output.shape
        if shape.rank is None or shape.rank == 0:
            return None
        sizes.add(shape[0])
    size = sizes.pop() if len(sizes) == 1 else None
    return size if isinstance(size, int) and size > 0 else None
