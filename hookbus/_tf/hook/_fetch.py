"""What a train-mode :class:`hookbus.EventBusHook` fetches on a due step, and how it reads it back.

TensorFlow's Python fetch handling costs tens of microseconds per fetched tensor (a hook
fetching three scalars every step measured 1.50 x a bare loop as a dict, 1.14 x as one stacked
tensor). So in ``begin`` the hook builds, for every union of keys its subscribers can ask for
together, one float64 tensor stacking the exact step and every real or boolean scalar key;
arrays and ``bytes`` (serialized summaries) are fetched as they are. A scalar comes back as the
same Python float :func:`hookbus._rules._values.to_value` would make of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookbus._bus._subscriber_view import SubscriberView

__all__ = ["TrainFetches", "key_sets"]

#: Up to this many distinct key sets among the subscribers, every union of them gets a packed
#: fetch; beyond it only each set and the full set do (any other union is fetched unpacked).
MAX_PACKED_SETS = 6

Keys = tuple[str, ...]


def packable(element: Any) -> bool:
    """Whether ``element`` is a real numeric or boolean scalar tensor."""
    dtype, shape = getattr(element, "dtype", None), getattr(element, "shape", None)
    if dtype is None or shape is None or shape.rank != 0:
        return False
    base = dtype.base_dtype
    return bool(base.is_floating or base.is_bool or base.is_integer)


def unions(sets: set[Keys], order: Keys) -> set[Keys]:
    """The key tuples a due step can fetch: unions of the subscribers' key sets, in ``order``."""
    distinct = sorted(sets)
    if len(distinct) > MAX_PACKED_SETS:
        return {*distinct, order}
    found: set[Keys] = set()
    for mask in range(1, 1 << len(distinct)):
        keys = {k for i, ks in enumerate(distinct) if mask >> i & 1 for k in ks}
        found.add(tuple(k for k in order if k in keys))
    return found


def key_sets(subscribers: Iterable[SubscriberView], keys: Keys, bus_keys: frozenset[str]) -> set[Keys]:
    """The publisher's ``keys`` each of its ``after_run`` subscribers wants, in ``keys``' order: what
    :meth:`TrainFetches.build` packs (``bus_keys``: the publisher's, which a subscriber must want)."""
    return {
        keys if r.keys is None else tuple(k for k in keys if k in r.keys)
        for r in subscribers
        if "after_run" in r.handlers and r.wants(bus_keys)
    }


class TrainFetches:
    """The due-step fetches of one train-mode hook, built in ``begin`` (before the graph is finalized)."""

    def __init__(self) -> None:
        self._graph: Any = None
        self._packs: dict[Keys, tuple[Any, Keys, bool]] = {}  # tensor, its scalar keys, whole fetch?
        self._layouts: dict[Keys, tuple[Keys, bool] | None] = {}
        self._args: dict[Keys, Any] = {}
        self._elements: dict[str, Any] = {}
        self._step: Any = None
        self._stop: Any = None
        self._tf: Any = None

    def build(
        self,
        tf: Any,
        graph: Any,
        elements: dict[str, Any],
        key_sets: set[Keys],
        order: Keys,
        step_after: Any,
        stop_read: Any,
    ) -> None:
        """Prepare the fetches for ``key_sets`` (each subscriber's keys, in ``order``).

        ``step_after`` is the step read after the train op (or ``None``), ``stop_read`` the
        shared stop flag of parameter-server training (or ``None``). A train/evaluate loop
        begins again on the same, finalized graph: the packed tensors are reused then.
        """
        self._tf, self._elements, self._step, self._stop = tf, elements, step_after, stop_read
        self._args, self._layouts = {}, {}
        if self._graph is graph and graph.finalized:
            return
        self._graph, self._packs = graph, {}
        scalars = {k for k, e in elements.items() if packable(e)}
        step = [] if step_after is None else [step_after]
        with graph.as_default(), tf.name_scope("hookbus_pack"):
            for union in unions({s for s in key_sets if s}, order):
                packed = tuple(k for k in union if k in scalars)
                if packed:
                    tensor = tf.stack([tf.cast(t, tf.float64) for t in step + [elements[k] for k in packed]])
                    self._packs[union] = (tensor, packed, len(packed) == len(union))

    def args(self, keys: Keys) -> Any:
        """The ``SessionRunArgs`` for a due step fetching ``keys`` (one object per key tuple)."""
        args = self._args.get(keys)
        if args is None:
            args = self._args[keys] = self._tf.compat.v1.train.SessionRunArgs(self._fetch(keys))
        return args

    def _fetch(self, keys: Keys) -> Any:
        pack = self._packs.get(keys)
        alone = pack is not None and pack[2] and self._stop is None
        self._layouts[keys] = None if pack is None else (pack[1], alone)
        if pack is not None and alone:
            return pack[0]
        fetch: dict[str, Any] = {"values": {k: self._elements[k] for k in keys if pack is None or k not in pack[1]}}
        if pack is not None:
            fetch["packed"] = pack[0]
        elif self._step is not None:
            fetch["step"] = self._step
        if self._stop is not None:
            fetch["stop"] = self._stop
        return fetch

    def unpack(self, keys: Keys, results: Any, counted: int) -> tuple[int, dict[str, Any]]:
        """The step and the values of a due step's ``results`` (``counted``: the step without a read)."""
        layout = self._layouts[keys]
        if layout is None:
            return (int(results["step"]) if "step" in results else counted), results["values"]
        packed, alone = layout
        row = (results if alone else results["packed"]).tolist()  # Python floats, in one call
        if self._step is not None:
            step, row = int(row[0]), row[1:]
        else:
            step = counted
        values = dict(zip(packed, row, strict=True))
        if not alone:
            rest = results["values"]
            values = {k: values[k] if k in values else rest[k] for k in keys}
        return step, values
