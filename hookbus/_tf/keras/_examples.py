"""How many examples a Keras ``fit`` trained: the count behind examples per second."""

from __future__ import annotations

from typing import Any

__all__ = ["KerasExamples"]


class KerasExamples:
    """Counts the examples a ``fit`` trained since it began, a function of the step (``Event.examples``).

    Inside an epoch, every batch but the last is full: the batch size times the batches trained. The
    last batch of an epoch may be short (100 examples in batches of 32: 32, 32, 32, 4), so at that batch,
    and at each epoch's end, the count comes from Keras's loss tracker (the ``loss`` entry of
    ``model.metrics``, a ``Mean`` that Keras weights by each batch's size and resets at each epoch's
    start): its ``count`` is the examples trained this epoch. The batch size is the one declared, else
    the model's input's static batch dimension, else learned from the tracker at the first due batch
    that is not an epoch's last (its count over the batches trained). All of it is read on due steps
    and at epoch ends only (the end being the start of ``fit``'s validation, where there is one: it
    resets the tracker and counts its own batches in it; with an input of unknown length, every due
    batch may be the last, and the tracker is read at each).

    Attributes:
        batch: The examples in a full batch (``None``: not known yet).
        last_batch: Whether the batch being published is its epoch's last (set by the callback).
    """

    def __init__(self) -> None:
        self.batch: int | None = None
        self.last_batch = False
        self._tracker: Any = None
        self._done: int | None = 0  # examples of this fit's epochs that ended (None: not known)
        self._epoch_from: int | None = None  # the step this epoch's training began at

    def start(self, model: Any, declared: int | None) -> None:
        """A ``fit`` of ``model`` begins (``declared``: the callback's ``batch_size``)."""
        self._tracker = _loss_tracker(model)
        self.batch = declared if declared is not None else _static_batch(model)
        self._done = 0
        self._epoch_from = None
        self.last_batch = False

    def epoch_begins(self, step: int) -> None:
        """An epoch begins at ``step`` (Keras reset its tracker)."""
        self._epoch_from = step

    def epoch_ends(self, step: int) -> None:
        """The epoch ended at ``step``: its examples join the count."""
        if self._epoch_from is None:
            return
        if self._done is not None:
            trained = self._in_epoch(step, last=True)
            self._done = None if trained is None else self._done + trained
        self._epoch_from = None

    def count(self, step: int) -> int | None:
        """The examples trained since the ``fit`` began, through ``step`` (``None``: not known)."""
        if self._epoch_from is None or self._done is None:
            return None
        trained = self._in_epoch(step, last=self.last_batch)
        return None if trained is None else self._done + trained

    def _in_epoch(self, step: int, *, last: bool) -> int | None:
        assert self._epoch_from is not None
        batches = max(0, step - self._epoch_from)
        batch = self.batch
        if batch is not None and not last:
            return batches * batch
        counted = self._counted()
        if counted is None or (counted == 0 and batches > 0):  # a training step that updates no tracker
            return None if batch is None else batches * batch
        if batch is None and not last and batches > 0 and counted % batches == 0:
            self.batch = counted // batches
        return counted

    def _counted(self) -> int | None:
        tracker = self._tracker
        if tracker is None:
            return None
        return round(float(tracker.count.numpy()))


def _loss_tracker(model: Any) -> Any:
    """Keras's loss tracker among ``model.metrics``: the ``Mean`` named ``loss`` (``None``: none)."""
    for metric in getattr(model, "metrics", ()):
        if getattr(metric, "name", None) == "loss" and hasattr(getattr(metric, "count", None), "numpy"):
            return metric
    return None


def _static_batch(model: Any) -> int | None:
    """The static batch dimension all the model's inputs share (``keras.Input(batch_size=...)``), or ``None``."""
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):  # a Sequential without Input before it is built
        return None
    sizes = {getattr(tensor, "shape", (None,))[0] if getattr(tensor, "shape", ()) else None for tensor in inputs or ()}
    size = sizes.pop() if len(sizes) == 1 else None
    return size if isinstance(size, int) and size > 0 else None
