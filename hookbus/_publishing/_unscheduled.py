"""The events no schedule plans: an evaluation's aggregated values and a Keras epoch's logs.

Whoever wants their keys receives them, at once; :class:`hookbus.publisher_api.PublisherCore` publishes them
through these functions with its bus's port (they hold nothing). Passive subscribers (an event
log) see them only beside someone who wants them, as they see a training step.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from hookbus._contract._publisher_keys import EPOCH_PREFIX, EVAL_PREFIX
from hookbus._rules._values import publishable

if TYPE_CHECKING:
    from hookbus._bus._port import BusPort
    from hookbus._bus._subscription import Subscriber

__all__ = ["eval_wanted", "publish_epoch", "publish_eval"]


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


def publish_epoch(port: BusPort, step: int, values: Mapping[str, Any]) -> None:
    """Publish an epoch event (``mode="epoch"``; ``values`` keyed ``epoch/<name>`` plus ``epoch``)
    to the subscribers that opt in (:meth:`hookbus._bus._subscription.Subscriber.wants_epochs`)."""
    keyset = frozenset(k for k in values if k.startswith(EPOCH_PREFIX))
    targets = [r for r in port.roster.here if r.wants_epochs(keyset) or (r.passive and "after_run" in r.handlers)]
    targets = _unless_only_passive(targets)
    if targets:
        event = port.event("after_run", step=step, mode="epoch", values=MappingProxyType(dict(values)))
        port.dispatcher.publish("after_run", event, targets)
