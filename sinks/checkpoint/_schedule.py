"""When :class:`~hookbus.sinks.CheckpointSink` saves by default: each epoch end under ``fit``, else by time.

The schedule arguments, when given, replace the default as a whole; when none is given the
default is chosen again at each train begin, from whether the publisher ends epochs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookbus.sink_api import Schedule

__all__ = ["NOT_GIVEN", "DefaultSchedule", "given_schedule"]


class _NotGiven:
    """The type of :data:`NOT_GIVEN`, one instance compared by identity; its ``repr`` is what
    ``help(CheckpointSink)`` shows as ``every_n_secs``'s default (an ``object()`` showed its address)."""

    def __repr__(self) -> str:
        return "<default schedule>"


#: ``every_n_secs`` not given: the default schedule applies unless ``every_n_steps`` is given.
NOT_GIVEN: Any = _NotGiven()


def given_schedule(every_n_steps: int | None, every_n_secs: float | None) -> tuple[int | None, float | None, bool]:
    """``(every_n_steps, every_n_secs, at_end)`` from the arguments as given (``every_n_secs`` may be
    :data:`NOT_GIVEN`): a given ``every_n_steps`` alone saves on steps only; neither given, every 600
    seconds until :meth:`DefaultSchedule.choose` says otherwise; both ``None``, only at the end of
    each session and on a stop (``at_end``)."""
    if every_n_secs is NOT_GIVEN:
        every_n_secs = None if every_n_steps is not None else 600.0  # given arguments replace the default
    return every_n_steps, every_n_secs, every_n_steps is None and every_n_secs is None


class DefaultSchedule:
    """The default schedule of a sink given no schedule argument: which of two, for the publisher.

    Args:
        by_time: The default elsewhere (the TF1 hook, the loop publisher).
        at_epochs: The default under Keras ``fit``: never due on a step; each epoch event saves.
    """

    def __init__(self, by_time: Schedule, at_epochs: Schedule) -> None:
        self.by_time = by_time
        self.epochs = at_epochs
        self.at_epochs = False  # whether the default now is each epoch end

    def choose(self, ends_epochs: bool) -> Schedule | None:
        """The schedule to switch to at a train begin, for a publisher that ends epochs (or not);
        ``None`` when the current one stays."""
        if ends_epochs == self.at_epochs:
            return None
        self.at_epochs = ends_epochs
        return self.epochs if ends_epochs else self.by_time
