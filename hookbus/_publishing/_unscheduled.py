"""The events no schedule plans: an evaluation's aggregated values, a test evaluation's and a Keras epoch's logs.

Whoever wants their keys receives them, at once; :class:`hookbus.publisher_api.PublisherCore` publishes them
through these functions with its bus's port (they hold nothing). Passive subscribers (an event
log) see them only beside someone who wants them, as they see a training step.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from hookbus._contract._publisher_keys import EPOCH_PREFIX, EVAL_PREFIX, TEST_PREFIX
from hookbus._rules._values import publishable

if TYPE_CHECKING:
    from hookbus._bus._port import BusPort
    from hookbus._bus._subscription import Subscriber

__all__ = ["eval_wanted", "publish_epoch", "publish_eval", "publish_test", "test_wanted"]


def _unless_only_passive(targets: list[Subscriber]) -> list[Subscriber]:
    """``targets`` if one of them is not passive, else none: passive subscribers observe only
    what is published for someone else (a training step does this by merging them in)."""
    return targets if any(not r.passive for r in targets) else []


def eval_wanted(port: BusPort, bus_keys: frozenset[str]) -> bool:
    """Whether any subscriber on this task wants one of an eval publisher's ``bus_keys``."""
    return any("after_run" in r.handlers and r.wants(bus_keys) for r in port.roster.here)


def publish_eval(port: BusPort, bus_keys: frozenset[str], step: int, values: Mapping[str, Any]) -> None:
    """Publish one evaluation's aggregated ``values`` as ``eval/<key>`` at training ``step`` to every
    subscriber wanting one of them, unless this evaluation's step was already published
    (``bus_keys``: the eval publisher's; see :meth:`hookbus.publisher_api.PublisherCore.publish_eval`)."""
    if not port.scope.evaluated.first(bus_keys, step):
        return
    prefixed = {EVAL_PREFIX + k: publishable(EVAL_PREFIX + k, v, step) for k, v in values.items()}
    keyset = frozenset(prefixed)
    subscribers = port.roster.here
    targets = [
        r for r in subscribers if "after_run" in r.handlers and not r.disabled and (r.passive or r.wants(keyset))
    ]
    event = port.event("after_run", step=step, mode="eval", values=MappingProxyType(prefixed))
    port.dispatcher.publish("after_run", event, _unless_only_passive(targets))


def test_wanted(port: BusPort, bus_keys: frozenset[str]) -> bool:
    """Whether a test evaluation of ``bus_keys`` (``test/<name>``) reaches anyone on this task
    (:meth:`hookbus._bus._subscription.Subscriber.wants_tests`) besides passive observers."""
    return any(r.wants_tests(bus_keys) and not r.passive for r in port.roster.here)


def publish_test(port: BusPort, step: int, values: Mapping[str, Any]) -> None:
    """Publish one test evaluation's ``values`` as ``test/<key>`` (``mode="test"``) at training ``step``
    to every subscriber its rule lets through (:meth:`~hookbus._bus._subscription.Subscriber.wants_tests`).

    Unlike validation it is published every time: a test evaluation is no step of training, so the
    one-evaluation-per-step rule (:mod:`hookbus._bus._evaluated`) does not apply, and it is no resume
    point for anyone."""
    prefixed = {TEST_PREFIX + k: publishable(TEST_PREFIX + k, v, step) for k, v in values.items()}
    keyset = frozenset(prefixed)
    targets = _unless_only_passive([r for r in port.roster.here if r.wants_tests(keyset)])
    if targets:
        event = port.event("after_run", step=step, mode="test", values=MappingProxyType(prefixed))
        port.dispatcher.publish("after_run", event, targets)


def publish_epoch(port: BusPort, step: int, values: Mapping[str, Any]) -> None:
    """Publish an epoch event (``mode="epoch"``; ``values`` keyed ``epoch/<name>`` plus ``epoch``)
    to the subscribers that opt in (:meth:`hookbus._bus._subscription.Subscriber.wants_epochs`)."""
    keyset = frozenset(k for k in values if k.startswith(EPOCH_PREFIX))
    targets = [r for r in port.roster.here if r.wants_epochs(keyset) or (r.passive and "after_run" in r.handlers)]
    targets = _unless_only_passive(targets)
    if targets:
        event = port.event("after_run", step=step, mode="epoch", values=MappingProxyType(dict(values)))
        port.dispatcher.publish("after_run", event, targets)
