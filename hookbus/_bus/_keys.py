"""Which keys the publishers of a bus provide, and the check every subscriber's keys pass."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Protocol

from hookbus._bus._subscription import Subscriber

__all__ = ["KeyRegistry", "Publisher", "UnknownKeyError", "did_you_mean"]

#: Keras's prefix of validation metrics (``val_loss``); the bus names them ``eval/loss``.
_KERAS_VAL = "val_"


#: What an unknown key's error advises where the publishers have no advice of their own.
DEFAULT_ADVICE = "Construct every publisher before training begins, each declaring the keys it provides."


class UnknownKeyError(ValueError):
    """A subscriber asked for a key that no publisher attached to the bus provides."""


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'eval/loss'?)`` for an unknown ``key``, or ``""`` when nothing is close.

    Keras's names first (``val_<name>`` is ``eval/<name>`` on the bus; ``<name>`` of an epoch
    log is ``epoch/<name>``), then the known keys closest in spelling (``difflib``, as the TF1
    hook's tensor names get).
    """
    known = sorted(known)
    keras = f"eval/{key[len(_KERAS_VAL) :]}" if key.startswith(_KERAS_VAL) else f"epoch/{key}"
    found = [keras] if keras in known else []
    for spelling in (keras, key) if key.startswith(_KERAS_VAL) else (key,):
        found += [k for k in difflib.get_close_matches(spelling, known, n=3) if k not in found]
    if not found:
        return ""
    hint = f"did you mean {' or '.join(map(repr, found[:3]))}?"
    if found[0] == keras and key.startswith(_KERAS_VAL):
        hint += f" Keras's {key!r} is {keras!r} on the bus"
    return f" ({hint})"


class Publisher(Protocol):
    """Every member of a publisher the bus uses (a :class:`hookbus.publisher_api.PublisherCore` has them)."""

    @property
    def bus_keys(self) -> frozenset[str]:
        """The keys it publishes, as subscribers name them (``eval/`` prefixed in eval mode, ``test/`` in test mode)."""
        ...

    @property
    def mode(self) -> str:
        """``"train"``, ``"eval"``, ``"test"`` or ``"epoch"``."""
        ...

    @property
    def shapes(self) -> Mapping[str, tuple[int | None, ...]]:
        """Static shapes by bus key, where known before step 1 (``()``: a scalar)."""
        ...

    @property
    def key_advice(self) -> str | None:
        """What to do about a key it does not provide, in its user's words (``None``: no advice of its own)."""
        ...


class KeyRegistry:
    """The publishers a bus knows of, for the key check and static shapes.

    Each run starts clean (README "Guarantees": a reused bus starts clean): a publisher that
    began in an earlier run counts again
    only once it begins in this one; a publisher constructed and not yet begun counts (an eval
    hook that begins after the train hook is known when the run starts).
    """

    def __init__(self) -> None:
        self.publishers: list[Publisher] = []
        self._begun: dict[int, int] = {}  # id(publisher) -> the run it last began in
        self.run = 0

    def register(self, publisher: Publisher) -> None:
        if publisher not in self.publishers:
            self.publishers.append(publisher)

    def new_run(self) -> None:
        self.run += 1

    def begun(self, publisher: Publisher) -> None:
        """``publisher`` begins in the current run."""
        self.register(publisher)
        self._begun[id(publisher)] = self.run

    def _current(self) -> list[Publisher]:
        return [p for p in self.publishers if self._begun.get(id(p), self.run) == self.run]

    @property
    def known(self) -> frozenset[str]:
        return frozenset().union(*(p.bus_keys for p in self._current()))

    def shape(self, key: str) -> tuple[int | None, ...] | None:
        for publisher in self._current():
            shape = publisher.shapes.get(key)
            if shape is not None:
                return tuple(shape)
        return None

    def check(self, subscribers: Iterable[Subscriber]) -> None:
        """Fail, naming the key and the known ones, if a subscriber needs an unknown key."""
        known = self.known
        for record in subscribers:
            missing = sorted((record.keys or frozenset()) - known)
            if missing:
                raise UnknownKeyError(
                    f"subscriber {record.name!r} needs key {missing[0]!r}, which no publisher "
                    f"attached to this bus provides{did_you_mean(missing[0], known)}; known keys: "
                    f"{sorted(known)}. {' '.join(self.advice())}"
                )

    def advice(self) -> list[str]:
        """What to do about an unknown key, in the words of the publishers of this run (once each)."""
        said = [p.key_advice for p in self._current() if p.key_advice]
        return list(dict.fromkeys(said)) or [DEFAULT_ADVICE]
