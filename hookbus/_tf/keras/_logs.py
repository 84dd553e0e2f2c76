"""Keras's logs as the bus's keys: the declared keys checked against them, the epoch keys and values.

Keras knows its log names only after the first batch, so :class:`~hookbus.EventBusCallback`
declares its keys and :class:`LogChecks` checks them against the first logs that carry them.
Every value of Keras's epoch logs is published at an epoch end as ``epoch/<name>``
(:func:`epoch_values`, the keys :class:`EpochKeys` makes known), and fit's ``val_<name>`` as the
evaluation's ``<name>`` (:func:`validation_values`, published as ``eval/<name>``). A test
evaluation (``model.evaluate`` outside ``fit``) publishes the declared keys as ``test/<name>``
(:class:`TestKeys` makes them known in every run, whether or not it evaluates).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from hookbus._bus._keys import did_you_mean
from hookbus._contract._publisher_keys import EPOCH_PREFIX, TEST_PREFIX
from hookbus._rules._validate import key_name

__all__ = ["EpochKeys", "LogChecks", "TestKeys", "epoch_values", "finite_logs", "validation_values"]

_VAL = "val_"  # Keras's prefix of fit's validation values


class EpochKeys:
    """Makes the epoch-level keys (``epoch/<name>``, ``epoch/val_<name>``) known to the bus."""

    mode = "epoch"
    key_advice: str | None = None  # the callback's own cores give it

    def __init__(self, keys: Iterable[str]) -> None:
        self.bus_keys = frozenset(EPOCH_PREFIX + p + k for k in keys for p in ("", _VAL))
        self.shapes: dict[str, tuple[int | None, ...]] = {}  # Keras logs scalars; none declared


class TestKeys:
    """Makes a test evaluation's keys (``test/<name>``) known to the bus in every run: a subscriber
    naming ``test/loss`` passes the key check under ``fit`` too, before any ``evaluate``."""

    mode = "test"
    key_advice: str | None = None  # the callback's own cores give it

    def __init__(self, keys: Iterable[str]) -> None:
        self.bus_keys = frozenset(TEST_PREFIX + k for k in keys)
        self.shapes: dict[str, tuple[int | None, ...]] = {}  # Keras logs scalars; none declared


def epoch_values(epoch: int, logs: Mapping[str, Any]) -> dict[str, Any]:
    """An epoch event's values: ``epoch/<name>`` for each number of Keras's epoch ``logs``, and
    ``epoch``, the 0-based index."""
    values: dict[str, Any] = {EPOCH_PREFIX + k: float(v) for k, v in logs.items() if isinstance(v, int | float)}
    return {**values, "epoch": float(epoch)}


def finite_logs(logs: Mapping[str, Any]) -> bool:
    """Whether every number in Keras's ``logs`` is finite (a NaN guard's stop leaves one that is not)."""
    return all(math.isfinite(v) for v in logs.values() if isinstance(v, int | float))


def validation_values(logs: Mapping[str, Any]) -> dict[str, Any]:
    """fit's validation in Keras's epoch ``logs``: ``val_<name>`` as ``<name>``."""
    return {k[len(_VAL) :]: v for k, v in logs.items() if k.startswith(_VAL)}


class LogChecks:
    """Whether Keras's logs carry the declared keys, and name nothing a sink cannot write.

    Args:
        keys: The keys declared to the bus, as Keras names them.
    """

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.names_checked = False  # the log names, once a fit (Keras's first batch logs)
        self.keys_checked = False  # the declared keys, at the first batch and each evaluation

    def reset(self) -> None:
        """A new ``fit``: check its first logs again."""
        self.names_checked = self.keys_checked = False

    def check_names(self, logs: Mapping[str, Any] | None) -> None:
        """Fail on a log name no sink can write, naming it."""
        # Every log name reaches the sinks in epoch events (CSV columns, TensorBoard tags): a
        # metric named with a line break fails at the first step, naming it.
        for key in logs or {}:
            key_name("Keras log key", key)
        self.names_checked = True

    def check_keys(self, logs: Mapping[str, Any], where: str) -> None:
        """Fail when a declared key is not in Keras's ``where`` logs, naming what they hold."""
        missing = [k for k in self.keys if k not in logs]
        if missing:
            first = missing[0]
            hint = did_you_mean(first, logs)
            if first.startswith(_VAL) and first[len(_VAL) :] in logs:
                name = first[len(_VAL) :]
                hint = f" ({first!r} is a validation value: declare {name!r}, published as 'eval/{name}')"
            raise ValueError(
                f"EventBusCallback keys {missing} are not in Keras's {where} logs {sorted(logs)}{hint}; "
                "declare keys as Keras names them (keys=[...])"
            )
        self.keys_checked = True
