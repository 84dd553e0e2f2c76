"""The graph elements a hook fetches: names resolved in its graph (with close matches), shapes."""

from __future__ import annotations

import difflib
from typing import Any

from hookbus._tf._import import require_tensorflow

__all__ = ["op_of", "resolve", "static_shape", "step_after"]


def _graph_names(graph: Any) -> list[str]:
    names: list[str] = []
    for op in graph.get_operations():
        names.append(op.name)
        names.extend(t.name for t in op.outputs)
    return names


def resolve(graph: Any, what: str, value: Any) -> Any:
    """The graph element ``value`` (a tensor, operation, variable or name) names in ``graph``."""
    if isinstance(value, str):
        try:
            return graph.as_graph_element(value)
        except (KeyError, ValueError):
            close = difflib.get_close_matches(value, _graph_names(graph), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"{what} {value!r} is not in the graph{hint}") from None
    tf = require_tensorflow("EventBusHook")
    if isinstance(value, tf.Variable | tf.Tensor | tf.Operation):
        element = value
        owner = value.graph
    else:
        raise TypeError(f"{what} must be a tensor, an operation, a variable or a name (got {value!r})")
    if owner is not graph:
        raise ValueError(f"{what} {getattr(value, 'name', value)!r} belongs to another graph than the one being run")
    return element


def static_shape(element: Any) -> tuple[int | None, ...] | None:
    """A tensor's or variable's static shape (``()`` for a scalar); ``None`` if unknown or an op."""
    shape = getattr(element, "shape", None)
    if shape is None or shape.rank is None:
        return None
    return tuple(shape.as_list())


def op_of(element: Any) -> Any:
    """The operation behind a tensor or variable (an operation is its own)."""
    tf = require_tensorflow("EventBusHook")
    return element.op if isinstance(element, tf.Tensor | tf.Variable) else element


def step_after(tf: Any, graph: Any, train_op: Any, global_step: Any, previous: Any) -> Any:
    """A read of ``global_step`` ordered after ``train_op``: the only exact step (docs/guides/contract.md
    "How it works", Steps). ``previous`` when it was made in ``graph`` already: the graph is
    finalized after the first session, and a train/evaluate loop begins again on it.

    Raises:
        ValueError: the graph has no global step.
    """
    if global_step is None:
        raise ValueError(
            "train_op is given but the graph has no global step; create it with "
            "tf.compat.v1.train.get_or_create_global_step() before building the train op"
        )
    if previous is not None and previous.graph is graph:
        return previous
    with graph.control_dependencies([train_op]):
        return tf.identity(global_step.read_value(), name="hookbus_step_after")
