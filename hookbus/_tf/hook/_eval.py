"""An eval-mode :class:`hookbus.EventBusHook`'s runs: each batch's fetch, the evaluation's
aggregation (:mod:`hookbus._tf.hook._eval_mean`) and what its end reads once more."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hookbus._tf._elements import resolve
from hookbus._tf.hook._eval_mean import EvalAggregator

__all__ = ["EvalRuns"]


class EvalRuns:
    """What an eval hook fetches per batch and publishes at the end of an evaluation (a session).

    Args:
        aggregate: ``"mean"`` or ``"final"`` per key (:func:`hookbus._tf.hook._eval_mean.check_aggregate`).
        batch_size: The batch size argument (a tensor or its name; ``None``: batches count equally).
    """

    def __init__(self, aggregate: Mapping[str, str], batch_size: Any) -> None:
        self._aggregator = EvalAggregator(aggregate)
        self._batch_size_arg = batch_size
        self._batch_size: Any = None  # its graph element, resolved in begin
        self._elements: Mapping[str, Any] = {}
        self._args: Any = None

    def begin(self, graph: Any, elements: Mapping[str, Any]) -> None:
        """The hook begins on ``graph``, its fetches resolved to ``elements``: resolve the batch size."""
        self._elements = elements
        if self._batch_size_arg is not None:
            self._batch_size = resolve(graph, "batch_size", self._batch_size_arg)
        self._args = None

    def start(self) -> None:
        """An evaluation (a session) begins."""
        self._aggregator.start()

    def run_args(self, tf: Any, wanted: Callable[[], bool]) -> Any:
        """A batch's ``SessionRunArgs``: the mean keys (with the batch size), or ``None`` when there
        are none or nobody wants this evaluation (``wanted()``, asked only when there are)."""
        if not self._aggregator.mean_keys or not wanted():
            return None
        if self._args is None:
            self._args = tf.compat.v1.train.SessionRunArgs(self._aggregator.fetch(self._elements, self._batch_size))
        return self._args

    def add(self, results: Any) -> None:
        """A batch's fetched ``results`` (nothing when it fetched nothing)."""
        if results:
            self._aggregator.add(results, weighted=self._batch_size is not None)

    def values(self, session: Any) -> dict[str, Any]:
        """The evaluation's values: the means, and the ``"final"`` keys read now from ``session``."""
        values = self._aggregator.means()
        final_keys = self._aggregator.final_keys
        if final_keys:
            values.update(session.run({k: self._elements[k] for k in final_keys}))
        return values
