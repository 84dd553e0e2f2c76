"""The global step between exact reads: what a graph publisher plans its quiet runs with.

A ``session.run`` may advance the global step by more than one (several optimizer steps per
run, a ``while_loop`` of steps, TensorFlow's ``steps_per_run``; other workers in
parameter-server training). The publisher reads the step exactly only on some runs (due
steps, stop-flag checks, a stop, session creation); between them it plans with an estimate:
the last exact step plus the runs since, times the increment per run. Every exact read
corrects the estimate and learns the increment again (the mean since the last read, rounded
up); a declared ``steps_per_run`` is the most one run advances, so the increment is never
taken as less: an estimate ahead of the step only fetches early (the due check is repeated
against the exact step), one behind it would fire late.
"""

from __future__ import annotations

__all__ = ["StepEstimate"]


class StepEstimate:
    """The step a publisher plans with, and the increment per run it learned.

    Args:
        per_run: The most steps one run advances, as declared, or ``None``: unknown until the
            first exact read.
    """

    __slots__ = ("_exact", "_runs", "coming", "declared", "per_run", "step", "went_back")

    def __init__(self, per_run: int | None = None) -> None:
        self.declared = per_run
        #: Steps one run is taken to advance: declared, then learned (``None``: not known yet).
        self.per_run = per_run
        #: The step after the last run: exact when the last read was, else estimated.
        self.step = 0
        #: The step the coming run is planned for: ``step`` plus the increment (one while unknown),
        #: kept by every write (a quiet run reads it, no call).
        self.coming = 1 if per_run is None else per_run
        self._exact = 0
        self._runs = 0  # runs since the last exact read
        #: Whether the last exact read was below the one before it, in one session (another task
        #: restored an older checkpoint under this one).
        self.went_back = False

    @property
    def known(self) -> bool:
        """Whether the increment per run was declared or learned (else a run must read the step)."""
        return self.per_run is not None

    def forget(self) -> None:
        """A new train op (another graph): back to the declared increment."""
        self.per_run = self.declared
        self.coming = self.step + (self.per_run or 1)

    def start(self, step: int) -> None:
        """A session starts at ``step`` (read exactly); the increment learned so far stays."""
        self.step = self._exact = step
        self._runs = 0
        self.went_back = False
        self.coming = step + (self.per_run or 1)

    def ran(self, exact: int | None) -> int:
        """One training run ended; ``exact`` is the step read after it (``None``: not read).

        Returns the step after the run: ``exact``, or the estimate.
        """
        self._runs += 1
        if exact is None:
            step = self.step = self.coming
            self.coming = step + (self.per_run or 1)
            return step
        return self.correct(exact)

    def correct(self, exact: int) -> int:
        """The step was read exactly after the runs counted so far: learn the increment."""
        runs, delta = self._runs, exact - self._exact
        self.went_back = delta < 0
        if runs > 0 and delta >= 0:  # a step that went back tells nothing about the increment
            self.per_run = max(self.declared or 1, -(-delta // runs))
        self.step = self._exact = exact
        self._runs = 0
        self.coming = exact + (self.per_run or 1)
        return exact
