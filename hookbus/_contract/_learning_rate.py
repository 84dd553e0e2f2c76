"""The learning rate a training publisher offers its sinks: read it, ask for a new one, learn it changed.

A publisher that can set the rate it trains with offers a :class:`RateBackend` (TensorFlow's are
in :mod:`hookbus._tf._learning_rate_tf`; sinks never import TensorFlow). Its core wraps it in a
:class:`LearningRate`, the sinks' side (``SinkContext.learning_rate``): the rate in effect, and
:meth:`LearningRate.request` for a new rate (or, on a schedule, a new multiplier on top of it).
A request is only recorded; the publisher applies it on the training thread before the next
training step (one machine), or at the step every worker agrees on (a collective strategy, see
:mod:`hookbus._tf._collective`), and the bus publishes ``learning_rate_changed`` with a
:class:`LearningRateChange`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from hookbus._rules._validate import positive_number

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "LEARNING_RATE_KEY",
    "LearningRate",
    "LearningRateChange",
    "RateBackend",
    "RateRequest",
    "offered_rate",
]

logger = logging.getLogger("hookbus")

#: The key every publisher offering a rate publishes it under, at the step it trained.
LEARNING_RATE_KEY = "learning_rate"

#: What to pass each publisher so that it offers a rate (the message of a sink that needs one).
HOW_TO_OFFER = (
    "EventBusHook(..., learning_rate=<the rate variable, or the rate tensor the train op uses>), "
    "LoopPublisher(..., learning_rate=<a tf.Variable> or optimizer=<the Keras optimizer>); "
    "EventBusCallback offers its model's optimizer's rate"
)


@dataclass(frozen=True)
class LearningRateChange:
    """Payload of ``learning_rate_changed``: a new learning rate was applied.

    Attributes:
        old: The rate before.
        new: The rate from step ``step + 1`` on (the key ``learning_rate`` at step ``s`` is the
            rate that trained step ``s``: events of ``step`` itself still show ``old``).
        multiplier: hookbus's multiplier on the schedule after it (1.0 where the rate is not
            scheduled).
        step: The global step at which it was applied (completed steps).
        reason: Why, as the requester said.
        source: Who asked (a subscriber's name, ``"user"``, or ``"cluster"`` for another worker's).
    """

    old: float
    new: float
    multiplier: float
    step: int
    reason: str
    source: str


@dataclass(frozen=True)
class RateRequest:
    """A recorded request: exactly one of ``rate`` and ``multiplier``."""

    rate: float | None
    multiplier: float | None
    reason: str
    source: str


class RateBackend(Protocol):
    """How a publisher reads and sets the rate it trains with (on the training thread).

    Attributes:
        scheduled: Whether the rate follows a schedule (a Keras ``LearningRateSchedule``, a TF1
            rate tensor): hookbus then sets a multiplier on top of it, never the rate itself.
    """

    scheduled: bool

    def read(self) -> float:
        """The rate the next training step uses (a schedule's value times the multiplier)."""
        ...

    def set_rate(self, rate: float) -> int | None:
        """Set the rate (a backend that is not ``scheduled``); the global step it took effect at,
        where other workers move it meanwhile (parameter-server training), else ``None``."""
        ...

    def set_multiplier(self, multiplier: float) -> int | None:
        """Set the multiplier on the schedule (a ``scheduled`` backend); returns as :meth:`set_rate`."""
        ...


class LearningRate:
    """The learning rate of the run's training publisher, as sinks see it (``SinkContext.learning_rate``).

    Args:
        backend: The publisher's :class:`RateBackend`.
        publisher: The publisher's name, for messages.
        who: The subscriber being called, if any (a request's default source).

    Attributes:
        scheduled: Whether the rate follows a schedule (requests then set a multiplier on it).
        rate: The rate in effect for the next training step, as last read (at session start,
            after every change, and on due steps that fetched ``learning_rate``).
        multiplier: hookbus's multiplier on the schedule (1.0 unless changed; always 1.0 when not
            ``scheduled``).
        pending: The request waiting to be applied, or ``None``.
        local: Whether this worker applies requests itself (one machine, a parameter-server
            chief); ``False`` under a collective strategy (the agreement applies them) and on a
            parameter-server worker that is not the chief (its requests are dropped).
        steered: Whether a sink steers it (:func:`~hookbus.sink_api.require_learning_rate`):
            under Keras ``fit`` the epoch's logs then carry ``learning_rate``, as Keras's own
            rate callbacks put it there (``history``, the callbacks after hookbus's, the epoch event).
    """

    def __init__(self, backend: RateBackend, *, publisher: str, who: Callable[[], str | None] = lambda: None) -> None:
        self._backend = backend
        self.publisher = publisher
        self._who = who
        self.scheduled = bool(backend.scheduled)
        self.multiplier = 1.0
        self.rate = math.nan
        self.pending: RateRequest | None = None
        self.local = True
        self.steered = False
        self._dropping = False  # a parameter-server worker that is not the chief
        self._warned = False

    @property
    def backend(self) -> RateBackend:
        """The publisher's backend behind it."""
        return self._backend

    def drop_requests(self) -> None:
        """A parameter-server worker that is not the chief: its requests are dropped (the chief's
        set the one rate every worker reads)."""
        self._dropping, self.local = True, False

    def request(self, *, reason: str, rate: float | None = None, multiplier: float | None = None) -> None:
        """Ask for a new rate from the next step on (exactly one of ``rate`` and ``multiplier``).

        ``rate``: the rate itself (on a schedule, the multiplier becomes ``rate`` over the
        schedule's value when applied). ``multiplier``: only on a schedule, the rate becomes the
        schedule's value times it (absolute, not relative to the last multiplier). A later
        request before it is applied replaces this one.

        Raises:
            ValueError: for a missing or empty ``reason``, both or neither of ``rate`` and
                ``multiplier``, a value that is not a finite number > 0, or ``multiplier`` on
                a rate that follows no schedule.
        """
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"reason must be a non-empty string (got {reason!r})")
        if (rate is None) == (multiplier is None):
            raise ValueError(
                f"request exactly one of rate= and multiplier= (got rate={rate!r}, multiplier={multiplier!r})"
            )
        if multiplier is not None and not self.scheduled:
            raise ValueError(
                f"{self.publisher}'s learning rate follows no schedule: ask for rate=<new rate> "
                f"(got multiplier={multiplier!r})"
            )
        checked_rate = None if rate is None else positive_number("rate", rate)
        checked_multiplier = None if multiplier is None else positive_number("multiplier", multiplier)
        if self._dropping:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "a learning-rate request on a parameter-server worker that is not the chief is dropped (%s): "
                    "the chief sets the one rate every worker reads; run the sink that decides it with runs_on='chief'",
                    reason,
                )
            return
        self.pending = RateRequest(checked_rate, checked_multiplier, reason, self._who() or "user")

    # -- the publisher's side --------------------------------------------------------------------------
    def refresh(self) -> float:
        """Read the rate in effect from the backend (at session start, after a change)."""
        self.rate = float(self._backend.read())
        return self.rate

    def seen(self, rate: float) -> None:
        """A due step fetched the rate that trained it (the rate stays in effect)."""
        self.rate = rate

    def multiplier_for(self, request: RateRequest) -> float:
        """The multiplier ``request`` asks for on a schedule (its rate over the schedule's value now)."""
        if request.multiplier is not None:
            return request.multiplier
        assert request.rate is not None
        base = self.refresh() / self.multiplier
        return request.rate / base

    def take(self) -> RateRequest:
        """The pending request, removed (there is one)."""
        request, self.pending = self.pending, None
        assert request is not None
        return request

    def apply(self, request: RateRequest, step: int, *, source: str | None = None) -> LearningRateChange:
        """Apply ``request`` now (the training thread, before the next step); the change made."""
        old = self.refresh()
        if self.scheduled:
            self.multiplier = self.multiplier_for(request)
            moved = self._backend.set_multiplier(self.multiplier)
        else:
            assert request.rate is not None
            moved = self._backend.set_rate(request.rate)
        new = self.refresh()
        step = step if moved is None else moved
        return LearningRateChange(old, new, self.multiplier, step, request.reason, source or request.source)

    def set_multiplier(self, multiplier: float) -> None:
        """Put ``multiplier`` in effect without a request."""
        if self.scheduled:
            self._backend.set_multiplier(multiplier)
            self.multiplier = multiplier


def offered_rate(
    current: LearningRate | None, backend: RateBackend | None, *, publisher: str, who: Callable[[], str | None]
) -> LearningRate | None:
    """The :class:`LearningRate` a publisher offers for ``backend`` (``None``: none), given the one
    it offered before: the same backend offered again keeps ``current``, with its request and
    multiplier (a hook beginning again, as ``train_and_evaluate``'s rounds do)."""
    if backend is None:
        return None
    if current is not None and current.backend is backend:
        return current
    return LearningRate(backend, publisher=publisher, who=who)
