"""Drive a bus with scripted steps and values, without TensorFlow, to test sinks.

Example::

    bus = hookbus.EventBus(clock=clock)
    bus.attach(MySink())
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.run({"loss": 1.0 / s} for s in range(1, 101))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from hookbus._contract._model import ModelView
from hookbus._contract._publisher_keys import EVAL_PREFIX, TEST_PREFIX
from hookbus._publishing._publisher import PublisherCore
from hookbus._tf._checkpoint_tf1 import TENSORFLOW

if TYPE_CHECKING:
    from hookbus._bus._bus import EventBus
    from hookbus._checkpoints._backend import CheckpointBackend
    from hookbus._contract._cluster import Task
    from hookbus._contract._events import Event
    from hookbus._contract._model import WeightsBackend

__all__ = ["FakeClock", "ScriptedPublisher"]

Values = Mapping[str, Any] | Callable[[int], Mapping[str, Any]]


class FakeClock:
    """A clock that moves only when told: pass it as ``EventBus(clock=...)``.

    Args:
        start: The initial reading (default 0.0).
        tick: Added after every reading (default 0.0).
    """

    def __init__(self, start: float = 0.0, tick: float = 0.0) -> None:
        self.now = start
        self.tick = tick

    def __call__(self) -> float:
        now = self.now
        self.now += self.tick
        return now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self.now += seconds


class ScriptedPublisher:
    """A publisher whose steps and values come from a script instead of a session.

    It plans exactly as the real publishers do: values are read (a callable is called) only on
    steps where a subscriber is due, and only the due subscribers' keys are taken.

    Args:
        bus: The bus to publish on.
        keys: The keys it provides.
        mode: ``"train"`` (default), ``"eval"`` or ``"test"`` (a test evaluation outside training,
            ``test/<key>``: :meth:`evaluate` publishes it, as ``model.evaluate`` under
            :class:`hookbus.EventBusCallback` does; no session).
        shapes: Static shapes by key, declared before step 1 as a graph publisher declares its
            tensors' shapes (default ``None``: unknown).
        weights: Offered to sinks as the live model's weights (``snapshot()`` /
            ``restore(snapshot)``, the model view's ``weights()``; default ``None``).
        model: Offered to sinks as the model's view at begin (a
            :class:`~hookbus.publisher_api.ModelView` answering what the test needs: metric
            directions, an export, ...; see ``PublisherCore.offer_model``; default ``None``: a
            view answering only ``weights``). Not with ``weights``.
        checkpoints: Offered to checkpoint sinks as the model's checkpoint backend at begin
            (see ``PublisherCore.offer_checkpoints``; default ``None``).
        task: Run the bus as this task of a cluster (see ``PublisherCore.set_task``; default
            ``None``: one machine).

    Attributes:
        step: The current training step.
        fetched: ``(step, keys)`` for every step on which something was fetched.
    """

    def __init__(
        self,
        bus: EventBus,
        keys: str | Iterable[str],
        *,
        mode: str = "train",
        shapes: Mapping[str, tuple[int | None, ...]] | None = None,
        weights: WeightsBackend | None = None,
        model: ModelView | None = None,
        checkpoints: CheckpointBackend | None = None,
        task: Task | None = None,
    ) -> None:
        if weights is not None and model is not None:
            raise ValueError("pass weights= or model= (a ModelView answering weights()), not both")
        self.core = PublisherCore(bus, keys, mode=mode)
        self.weights = weights
        self.model = model if model is not None or weights is None else _Weights(weights)
        self.checkpoints = checkpoints
        if task is not None:
            self.core.set_task(task)
        unknown = sorted(set(shapes or {}) - set(self.core.keys))
        if unknown:
            raise ValueError(f"shapes names key {unknown[0]!r}, which is not in keys {sorted(self.core.keys)}")
        prefix = {"eval": EVAL_PREFIX, "test": TEST_PREFIX}.get(self.core.mode, "")
        self.core.shapes = {prefix + k: tuple(shape) for k, shape in (shapes or {}).items()}
        self.bus = bus
        self.step = 0
        self.fetched: list[tuple[int, tuple[str, ...]]] = []

    def sample_system(self) -> None:
        """Publish one sample of the machine now, on this thread (what the bus's sampler thread
        does on its own clock): a test of a ``system`` handler needs no sleep. Raises
        ``RuntimeError`` when the bus samples nothing now (``system_metrics=False``, or before
        :meth:`begin`)."""
        self.core.sample_system()

    def begin(self) -> None:
        """Publish ``begin`` (keys are checked)."""
        if self.model is not None:
            self.core.offer_model(self.model)
        if self.checkpoints is not None:
            self.core.offer_checkpoints(self.checkpoints, TENSORFLOW)
        self.core.begin()

    def session(self, step: int = 0, restored: bool | None = None) -> None:
        """A session starts (or restarts, rewound) at ``step``."""
        self.step = step
        self.core.session_created(step, restored)

    def advance(self, values: Values, *, step: int | None = None) -> bool:
        """Run one training step; returns whether a stop was requested.

        Args:
            values: The step's values, or a function of the step returning them.
            step: The step after the run (default: one more than the last).
        """
        actual = self.step + 1 if step is None else step
        plan = self.core.plan(actual)
        if plan is not None:
            got = values(actual) if callable(values) else values
            self.fetched.append((actual, plan.keys))
            self.core.publish_step(plan, actual, {k: got[k] for k in plan.keys if k in got})
        else:
            self.core.advance(actual)
        self.step = actual
        return self.core.should_stop()

    def evaluate(self, values: Mapping[str, Any], *, step: int | None = None) -> None:
        """Publish one evaluation (eval or test mode) of ``values`` at training ``step``."""
        self.core.publish_eval(self.step if step is None else step, values)

    def end(self, final_values: Values | None = None) -> None:
        """Publish the ``at_end`` event (if owed) and ``end``."""
        final = self.core.final_plan(self.step)
        if final is not None:
            got = final_values(self.step) if callable(final_values) else (final_values or {})
            self.core.publish_final(final, {k: got[k] for k in final.keys if k in got})
        self.core.end(self.step)

    def event(self, signal: str, *, step: int | None = None, **fields: Any) -> Event:
        """An event of ``signal`` at ``step`` (default: the current step), stamped as the bus stamps its own."""
        return self.core._port.event(signal, step=self.step if step is None else step, mode=self.core.mode, **fields)

    def publish(self, signal: str, payload: Any) -> None:
        """Deliver ``payload`` as ``signal`` to every subscriber here, as the bus delivers its own
        (a ``checkpoint_saved`` that no checkpoint sink saved; an event no plan made)."""
        self.core._port.dispatcher.publish(signal, payload)

    def run(self, steps: Iterable[Values], *, start: int = 0) -> int:
        """``begin``, a session at ``start``, one step per item until a stop, ``end``.

        Returns the last step.
        """
        self.begin()
        self.session(start)
        last: Values | None = None
        for values in steps:
            last = values
            if self.advance(values):
                break
        self.end(last)
        return self.step


class _Weights(ModelView):
    """The view of ``ScriptedPublisher(weights=...)``: its weights, nothing else."""

    def __init__(self, weights: WeightsBackend) -> None:
        self._weights = weights

    def weights(self) -> WeightsBackend:
        return self._weights
