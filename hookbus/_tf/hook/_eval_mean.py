"""How an eval-mode :class:`hookbus.EventBusHook` aggregates an evaluation: means over batches
(weighted by batch size when it is known), or values read once at the end."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["AGGREGATIONS", "EvalAggregator", "check_aggregate"]

AGGREGATIONS = ("mean", "final")


def check_aggregate(aggregate: str | Mapping[str, str], keys: Iterable[str]) -> dict[str, str]:
    """``aggregate`` per key of ``keys`` (a name for all, or a mapping; unnamed keys: ``"mean"``)."""
    keys = list(keys)
    if isinstance(aggregate, str):
        per_key = dict.fromkeys(keys, aggregate)
    elif isinstance(aggregate, Mapping):
        unknown = sorted(set(aggregate) - set(keys))
        if unknown:
            raise ValueError(f"aggregate names key {unknown[0]!r}, which is not in fetches {sorted(keys)}")
        per_key = {k: aggregate.get(k, "mean") for k in keys}
    else:
        raise TypeError(f"aggregate must be 'mean', 'final' or a mapping of key to one of them (got {aggregate!r})")
    for key, how in per_key.items():
        if how not in AGGREGATIONS:
            raise ValueError(f"aggregate for {key!r} must be 'mean' or 'final' (got {how!r})")
    return per_key


class EvalAggregator:
    """One evaluation's running sums: what to fetch per batch, what to publish at the end.

    Args:
        aggregate: ``"mean"`` or ``"final"`` per key (:func:`check_aggregate`).
    """

    def __init__(self, aggregate: Mapping[str, str]) -> None:
        self.aggregate = dict(aggregate)
        self.mean_keys = tuple(k for k, how in self.aggregate.items() if how == "mean")
        self.final_keys = tuple(k for k, how in self.aggregate.items() if how == "final")
        self._sums: dict[str, Any] = {}
        self._weight = 0.0  # batches seen, or examples when the batch size is fetched too

    def start(self) -> None:
        """A new evaluation (session) begins."""
        self._sums, self._weight = {}, 0.0

    def fetch(self, elements: Mapping[str, Any], batch_size: Any) -> Any:
        """The per-batch fetch: the mean keys' elements (and ``batch_size``'s element, if given)."""
        fetch = {k: elements[k] for k in self.mean_keys}
        return fetch if batch_size is None else {"values": fetch, "size": batch_size}

    def add(self, results: Any, weighted: bool) -> None:
        """One batch's fetched ``results`` (as :meth:`fetch` asked for them)."""
        # Weighted by the batch's size when it is known, as TensorFlow's streaming metrics and
        # Keras's evaluate are: a short last batch must not count as much as a full one.
        weight = 1.0
        if weighted:
            results, weight = results["values"], float(results["size"])
        self._weight += weight
        for key, value in results.items():
            total = self._sums.get(key)
            self._sums[key] = value * weight if total is None else total + value * weight

    def means(self) -> dict[str, Any]:
        """The evaluation's mean of every mean key (none before a batch)."""
        return {k: v / self._weight for k, v in self._sums.items()} if self._weight else {}
