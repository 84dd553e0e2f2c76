"""The k best checkpoints by a monitored value: the ranking ``CheckpointSink(keep_best=k)`` keeps."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hookbus.sink_api import step_of

from .._monitor import Monitor

if TYPE_CHECKING:
    from hookbus.sink_api import CheckpointStore

__all__ = ["BestCheckpoints"]


class BestCheckpoints:
    """A ranking of checkpoint prefixes by ``monitor``, worst first, at most ``keep`` long.

    Pure bookkeeping: the sink decides which files to write; this says what to keep and drop.
    """

    def __init__(self, monitor: Monitor, keep: int) -> None:
        self.monitor = monitor
        self.keep = keep
        self.entries: list[tuple[float, str]] = []

    def load(self, store: CheckpointStore, directory: str) -> None:
        """Recover the ranking from ``directory`` in ``store`` (each checkpoint's state file holds its value)."""
        self.entries = []
        for path in store.checkpoints(directory):
            data = store.read_state(path) or {}
            if isinstance(data.get("value"), int | float):
                self.add(float(data["value"]), path)

    def admits(self, step: int, value: float) -> bool:
        """Whether a checkpoint of ``step`` with ``value`` would enter the ranking."""
        if not math.isfinite(value) or any(step_of(p) == step for _, p in self.entries):
            return False
        return len(self.entries) < self.keep or self.monitor.better(value, self.entries[0][0])

    def add(self, value: float, path: str) -> list[str]:
        """Rank ``path``; return the prefixes that fell out of the best ``keep``.

        Of equal values the earlier step ranks better, as Keras's ``ModelCheckpoint`` keeps the
        first of equal bests (only a strictly better value replaces it).
        """
        sign = -1.0 if self.monitor.mode == "min" else 1.0

        def rank(item: tuple[float, str]) -> tuple[float, int]:
            return sign * item[0], -(step_of(item[1]) or 0)

        ranked = sorted([*self.entries, (value, path)], key=rank)
        dropped, self.entries = ranked[: -self.keep], ranked[-self.keep :]
        return [p for _, p in dropped]

    @property
    def paths(self) -> list[str]:
        """The kept prefixes, worst first (the best last, as the pointer wants it)."""
        return [p for _, p in self.entries]

    @property
    def best(self) -> str | None:
        return self.entries[-1][1] if self.entries else None
