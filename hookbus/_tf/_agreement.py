"""Agreed decisions: a value decided on one worker (or from every worker's), applied everywhere at once.

Workers that train in lockstep must act together: a stop one of them asks for, or a new
learning rate one of them decides, takes effect at one global step on every worker, or the
others wait in their next all-reduce forever (or train on with another rate). An
:class:`AgreedDecision` is one kind of such decision. Each worker may :meth:`~AgreedDecision.propose`
a value (from any thread); at an agreement round, which every worker runs at the same step,
:func:`agree` exchanges every kind's proposals in one sum-reduction (each worker fills its own
slot, so the sum holds every worker's), and every worker settles on the same :class:`Decided`
value from the same reduced numbers, applied at the same step (the round's, or ``delay`` steps
later). The transport is the caller's: an all-reduce under a collective strategy
(:class:`hookbus._tf._collective.CollectiveStop`), or anything that sums a list of floats.

The stop is the first kind (proposed by the run's :class:`~hookbus._bus._stops.Stops`); a planned
last step is the second; the learning rate will be the third.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["AgreedDecision", "Decided", "Proposal", "agree"]

#: Sums one list of floats over every worker (each worker passes its own; all get the sum).
Exchange = Callable[[list[float]], list[float]]


@dataclass(frozen=True)
class Proposal:
    """One worker's proposal: the value, why, who asked, and at which step."""

    value: float
    reason: str
    source: str
    step: int


@dataclass(frozen=True)
class Decided:
    """What every worker settled on in one round.

    Attributes:
        kind: The decision's kind (``"stop"``, ``"learning_rate"``, ...).
        value: The agreed value (every worker computes the same from the same sums).
        at_step: The global step it applies at, on every worker.
        by: The workers whose proposals it came from, in slot order.
        agreed_at: The step of the round that agreed it.
    """

    kind: str
    value: float
    at_step: int
    by: tuple[str, ...]
    agreed_at: int


def _first(values: Sequence[float]) -> float:
    return values[0]


class AgreedDecision:
    """One kind of decision the workers agree on and apply at one global step.

    Args:
        kind: Its name.
        combine: The value from the proposing workers' values, in slot order (default: the
            first worker's, i.e. the chief's when it proposes). Return ``None`` for no decision.
        apply: Called with the decision on the training thread once its step is reached
            (:meth:`apply_due`), once per decision.
        delay: Steps from the round to the step it applies at (default 0: the round's step).
    """

    def __init__(
        self,
        kind: str,
        *,
        combine: Callable[[Sequence[float]], float | None] = _first,
        apply: Callable[[Decided], object] | None = None,
        delay: int = 0,
    ) -> None:
        if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
            raise ValueError(f"delay must be a non-negative int of steps (got {delay!r})")
        self.kind = kind
        self.delay = delay
        self._combine = combine
        self._apply = apply
        self.proposal: Proposal | None = None
        #: The last decision settled, applied or not.
        self.decided: Decided | None = None
        self._due: Decided | None = None

    def propose(self, value: float, *, reason: str, source: str, step: int) -> None:
        """This worker proposes ``value`` (any thread; the latest proposal goes to the next round)."""
        self.proposal = Proposal(float(value), reason, source, step)

    def encode(self, slot: int, count: int) -> list[float]:
        """This worker's share of a round: ``count`` flags, then ``count`` values; its own slot set."""
        share = [0.0] * (2 * count)
        proposal = self.proposal
        if proposal is not None:
            share[slot] = 1.0
            share[count + slot] = proposal.value
        return share

    def settle(self, totals: Sequence[float], names: Sequence[str], step: int) -> Decided | None:
        """Decode a round's sums (:meth:`encode`'s layout, summed over workers) into a decision.

        Every worker settles on the same decision from the same sums. The round spends this
        worker's proposal, decided or not: each round is a fresh vote.
        """
        self.proposal = None
        count = len(names)
        by = [i for i in range(count) if totals[i] > 0]
        if not by:
            return None
        value = self._combine([totals[count + i] for i in by])
        if value is None:
            return None
        decided = Decided(self.kind, float(value), step + self.delay, tuple(names[i] for i in by), step)
        self.decided = self._due = decided
        return decided

    def apply_due(self, step: int) -> Decided | None:
        """Apply the decision whose step ``step`` reached (once), and return it; else ``None``."""
        due = self._due
        if due is None or step < due.at_step:
            return None
        self._due = None
        if self._apply is not None:
            self._apply(due)
        return due

    def reset(self) -> None:
        """A session starts: nothing proposed or pending."""
        self.proposal = self.decided = self._due = None


def agree(
    decisions: Sequence[AgreedDecision], exchange: Exchange, *, slot: int, names: Sequence[str], step: int
) -> list[Decided]:
    """One agreement round at ``step`` (every worker calls it at the same step, same ``decisions``
    in the same order): one exchange for every kind; returns what was decided, and applies what is
    due now."""
    count = len(names)
    share: list[float] = []
    for decision in decisions:
        share += decision.encode(slot, count)
    totals = exchange(share)
    decided = []
    for i, decision in enumerate(decisions):
        found = decision.settle(totals[2 * count * i : 2 * count * (i + 1)], names, step)
        if found is not None:
            decided.append(found)
            decision.apply_due(step)
    return decided
