"""What publishers use of a bus, kept off the bus's public surface.

:class:`hookbus.PublisherCore` holds a bus's port; so do the publishers' helpers for
multi-worker training. Users of a bus never need it: they attach, subscribe, stop and close.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hookbus._checkpoints._store import CheckpointStore
from hookbus._contract._cluster import Task
from hookbus._contract._events import _EMPTY, Event

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from hookbus._bus._barrier import Barrier
    from hookbus._bus._dispatch import Dispatcher
    from hookbus._bus._keys import KeyRegistry, Publisher
    from hookbus._bus._offers import Offers
    from hookbus._bus._roster import Roster
    from hookbus._bus._run import RunScope
    from hookbus._bus._state import RunState
    from hookbus._bus._stops import Stops
    from hookbus._bus._subscription import Subscriber
    from hookbus._checkpoints._backend import CheckpointBackend
    from hookbus._contract._context import EpochProgress
    from hookbus._contract._learning_rate import LearningRate
    from hookbus._contract._profiling import ProfilerBackend, Profiling
    from hookbus._contract._weights import WeightsBackend

__all__ = ["BusPort"]


class BusPort:
    """The publisher-facing side of a bus, over the bus's parts.

    Args:
        roster, keys, state, stops, dispatcher, barrier, scope, offers: The bus's parts.
        clock, wall_clock: The bus's clocks.
        set_task: Runs the bus as a task (the roster, and the bus's ``task`` attribute).
        profiling: The profiling seam: a train publisher offers its profiler and marks its steps there.

    Attributes:
        roster: The bus's subscribers, read-only here: a publisher's core re-plans when its
            ``version`` moved (bumped on every (un)subscription and new run), compared on every quiet step.
        profiling: The profiling seam.
    """

    def __init__(
        self,
        *,
        roster: Roster,
        keys: KeyRegistry,
        state: RunState,
        stops: Stops,
        dispatcher: Dispatcher,
        barrier: Barrier,
        scope: RunScope,
        offers: Offers,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        set_task: Callable[[Task | None], None],
        profiling: Profiling,
    ) -> None:
        self._roster = self.roster = roster
        self._keys = keys
        self._state = state
        self._stops = stops
        self._dispatcher = dispatcher
        self._barrier = barrier
        self._scope = scope
        self._offers = offers
        self._clock = clock
        self._wall_clock = wall_clock
        self._set_task = set_task
        self.profiling = profiling

    @property
    def run(self) -> int:
        """Which run of the bus this is (1, 2, ...): a new run's sessions are not resumes of the last's."""
        return self._scope.runs

    @property
    def previous_step(self) -> int | None:
        """The step the bus's previous run ended at (``None`` in its first run)."""
        return self._scope.previous_step

    @property
    def local_subscribers(self) -> list[Subscriber]:
        """The subscribers that run on this task (all of them on one machine), in dispatch order."""
        return list(self._roster.here)

    @property
    def stops(self) -> Stops:
        """The run's stops (what the transports across workers read and request through)."""
        return self._stops

    def register(self, publisher: Publisher) -> None:
        """Make ``publisher``'s keys known to the bus (on construction: checked at begin)."""
        self._keys.register(publisher)

    def set_task(self, task: Task | None) -> None:
        """Run as ``task`` of a multi-worker cluster (before ``begin``): subscribers whose
        ``runs_on`` excludes it are neither planned nor called; ``runs_on="each"`` sinks get
        the task's output suffix."""
        if task is not None and not isinstance(task, Task):
            raise TypeError(f"task must be a hookbus.Task or None (got {task!r})")
        self._set_task(task)

    def start(self, publisher: Publisher) -> None:
        """``publisher`` begins: keys checked (once per run), subscriptions closed, contexts given."""
        self._scope.start(publisher)

    def link_evaluator(self) -> None:
        """A train publisher begins: listen for an evaluator task's stop (see
        :mod:`hookbus._checkpoints._run_files`)."""
        self._scope.link_evaluator()

    def offer_checkpoints(self, backend: CheckpointBackend | None, store: CheckpointStore | None = None) -> None:
        """Save and restore through ``backend``, the files kept by ``store`` (``None`` withdraws both).

        The bus knows no layout of its own: a publisher gives the store its checkpoints live in
        (the TensorFlow publishers give TensorFlow's), so nothing here depends on a framework.
        """
        if backend is None:
            self._offers.checkpoints = None
            return
        if not isinstance(store, CheckpointStore):
            raise TypeError(
                f"store must be a hookbus.CheckpointStore (got {store!r}): give the store the checkpoints "
                "live in, e.g. hookbus.FileCheckpointStore('.npz') for a framework without a layout of its own"
            )
        self._offers.checkpoints = (backend, store)

    def offer_profiler(self, backend: ProfilerBackend | None) -> None:
        """Profile through ``backend`` when a sink asks for a window (``None`` withdraws it)."""
        self.profiling.offer(backend)

    def offer_weights(self, weights: WeightsBackend | None) -> None:
        self._offers.weights = weights

    def offer_graph(self, graph_def: Callable[[], bytes | None] | None) -> None:
        """How sinks get the training graph (a serialized ``GraphDef``), read when they need it."""
        self._offers.graph_def = graph_def

    def offer_model_config(self, config: Callable[[], str | None] | None) -> None:
        self._offers.model_config = config

    def offer_directions(self, directions: Callable[[str], str | None] | None) -> None:
        self._offers.directions = directions

    def offer_epochs(self, ends_epochs: bool) -> None:
        self._offers.ends_epochs = ends_epochs

    def offer_progress(self, progress: Callable[[], EpochProgress | None] | None) -> None:
        """How sinks learn the epoch a training publisher is in (``None`` withdraws it)."""
        self._offers.progress = progress

    def offer_learning_rate(self, rate: LearningRate | None) -> None:
        """The training publisher's learning rate, for the sinks that read or steer it."""
        self._offers.learning_rate = rate

    def current_name(self) -> str | None:
        """The subscriber being called, if any (a request's source)."""
        return self._dispatcher.current_name()

    def event(
        self, signal: str, *, step: int, mode: str = "train", values: Mapping[str, Any] = _EMPTY, final: bool = False,
        **fields: Any,
    ) -> Event:  # fmt: skip
        """An :class:`Event` stamped with the bus's clocks (and the task, in multi-worker training)."""
        task = self._roster.task
        wall_time, elapsed = self._wall_clock(), self._state.elapsed(self._clock())
        if task is None and not fields:  # a due step's: every field by position, no keywords packed (-0.3 us)
            stop = self._stop_at
            return Event(signal, step, mode, values, wall_time, elapsed, False, False, final, None, None, None, stop)
        if task is not None:
            fields.update(task_type=task.type, task_index=task.index, local_step=self._state.local_step)
        return Event(signal, step, mode, values, wall_time, elapsed, final=final, _stop=self._stop_at, **fields)

    def _stop_at(self, reason: str, step: int) -> None:
        self._stops.request(reason, step=step)

    def publish(self, signal: str, payload: Any, subscribers: Iterable[Subscriber] | None = None) -> None:
        """Deliver ``payload`` in order, isolated, to ``subscribers`` (default: all here)."""
        self._dispatcher.publish(signal, payload, subscribers)

    def set_step(self, step: int) -> None:
        self._state.step = step

    def set_local_step(self, local_step: int) -> None:
        self._state.local_step = local_step

    def first_evaluation(self, keys: frozenset[str], step: int) -> bool:
        """Whether an evaluation of ``keys`` at training ``step`` counts (see :mod:`hookbus._bus._evaluated`)."""
        return self._scope.evaluated.first(keys, step)

    def resume_evaluations(self, step: int) -> None:
        """Training resumes at ``step``: evaluations of later steps count again."""
        self._scope.evaluated.resume(step)

    def flush_sinks(self, step: int) -> None:
        """Hand everything the sinks received to the OS (a publisher's end)."""
        self._barrier.flush(step, f"at the end of a session (step {step})")

    def mark_evaluated(self, prefix: str, store: CheckpointStore) -> None:
        """An evaluation of checkpoint ``prefix`` finished (see :meth:`hookbus._bus._barrier.Barrier.mark_evaluated`);
        ``store`` is the layout it lives in, used where no publisher of this bus offers one."""
        offered = self._offers.checkpoints
        self._barrier.mark_evaluated(offered[1] if offered is not None else store, prefix)

    def hold(self) -> None:
        """Keep deferred work and stop requests waiting (see :meth:`hookbus._bus._dispatch.Dispatcher.hold`)."""
        self._dispatcher.hold()

    def release(self) -> None:
        """Run what a :meth:`hold` kept waiting."""
        self._dispatcher.release()

    def poll(self, before: Callable[[], object] | None = None) -> None:
        """Act, on the training thread, on signals and stops recorded since the last step
        (``before`` runs first when there is one to act on)."""
        self._stops.poll(before)
