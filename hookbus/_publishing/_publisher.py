"""What every publisher shares: keys, per-step planning, conversion and publication.

The TensorFlow hook, the Keras callback and the loop publisher wrap a :class:`PublisherCore`;
so does :mod:`hookbus.testing`. Planning is the hot path: on a step where no subscriber is due
:meth:`PublisherCore.plan` compares two numbers and returns ``None``. Which subscribers can be
due, their bounds and the fetch-key union are :mod:`hookbus._publishing._planner`'s; the key names and
prefixes :mod:`hookbus._contract._publisher_keys`'s; evaluations and epochs, which no schedule plans,
:mod:`hookbus._publishing._unscheduled`'s.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from hookbus._bus._alarm import Bell
from hookbus._bus._subscriber_view import SubscriberView, views
from hookbus._bus._subscription import Subscriber
from hookbus._checkpoints._store import CheckpointStore
from hookbus._contract._events import WaitForStep
from hookbus._contract._learning_rate import LEARNING_RATE_KEY, LearningRate, offered_rate
from hookbus._contract._model import NOT_OFFERED, ModelView
from hookbus._contract._publisher_keys import (
    EVAL_PREFIX,
    TEST_PREFIX,
    check_fetch_keys,
    check_mode,
)
from hookbus._publishing._planner import Plan, Planner, planned
from hookbus._publishing._throughput import Throughput
from hookbus._publishing._unscheduled import eval_wanted, publish_epoch, publish_eval, publish_test, test_wanted
from hookbus._rules._validate import flag
from hookbus._rules._values import publishable_values

if TYPE_CHECKING:
    from hookbus._bus._bus import EventBus
    from hookbus._bus._keys import Publisher
    from hookbus._bus._sampler import SystemMetrics
    from hookbus._bus._stops import Stops
    from hookbus._checkpoints._backend import CheckpointBackend
    from hookbus._contract._cluster import Task
    from hookbus._contract._learning_rate import RateBackend, RateRequest
    from hookbus._contract._profiling import ProfilerBackend, Profiling
    from hookbus._contract._system import MachineOffer

__all__ = ["PublisherCore"]

#: Dispatch order: a step's due subscribers and its observers are merged by it.
_dispatch_order = attrgetter("sort_key")


class PublisherCore:
    """What every publisher shares: keys, the step, the lifecycle, planning and publication.

    A publisher adds only how it counts steps and fetches values: it calls :meth:`begin` and
    :meth:`session_created`, then for each training step :meth:`plan` — ``None`` when nothing
    is due (then :meth:`advance`), else a :class:`Plan` whose ``keys`` it fetches and hands back
    with :meth:`publish_step` — and :meth:`should_stop`; at the end :meth:`final_plan` / :meth:`publish_final`
    and :meth:`end`. Only the core moves the bus's step. Guide:
    docs/guides/writing-a-publisher.md "Writing a publisher";
    every name a publisher needs (this class, :class:`Plan`, the model view, the backends and the
    checkpoint store its ``offer_*`` methods take, the key prefixes) is in :mod:`hookbus.publisher_api`.

    Args:
        bus: The bus to publish on; the publisher registers its keys there.
        keys: The keys it can fetch (its ``fetches``' names); a ``str`` is one key.
        mode: ``"train"`` (scheduled steps), ``"eval"`` (one aggregated event per evaluation,
            keys published as ``eval/<key>``) or ``"test"`` (a test evaluation outside training,
            keys published as ``test/<key>``: :meth:`publish_eval` publishes it; a test publisher
            creates no session, so no sink takes it for a resume point).
    """

    def __init__(self, bus: EventBus, keys: str | Iterable[object], *, mode: str = "train") -> None:
        from hookbus._bus._bus import EventBus

        if not isinstance(bus, EventBus):
            raise TypeError(f"bus must be a hookbus.EventBus (got {bus!r})")
        self.bus = bus
        self._port = port = bus._port
        # The parts of the bus this core talks to (the port hands them over; it forwards nothing).
        self._state = port.state  # the bus's step: only the core writes it
        self._dispatcher = port.dispatcher
        self._scope = port.scope
        self._offers = port.offers
        self._profiling = port.offers.profiler  # a step in a profile window is never quiet
        self.mode = check_mode(mode)
        self.keys = check_fetch_keys(keys)
        prefix = {"eval": EVAL_PREFIX, "test": TEST_PREFIX}.get(self.mode, "")
        self.bus_keys = frozenset(prefix + k for k in self.keys)
        #: Static shapes of the values, by bus key, where the publisher knows them before step 1
        #: (a graph tensor's shape; ``None`` entries for unknown dimensions). Sinks that need a
        #: scalar check it at begin (their context's ``static_shape``).
        self.shapes: dict[str, tuple[int | None, ...]] = {}
        #: What a subscriber's unknown key's error tells the user to do, in this publisher's terms
        #: (``None``: construct every publisher before training begins, each declaring its keys).
        self.key_advice: str | None = None
        self._stops = port.stops
        self._roster = port.roster  # its version: a quiet step compares it, plans are stale when it moved
        self._planner = Planner(self.keys, self.bus_keys)
        self._version = -1  # the roster's version the planner last read
        self._next_step = self._next_time = -math.inf  # the planner's bounds: what a quiet step compares
        # The run's timer marks the next due time passed: a quiet step reads a bell, not the clock
        # (a bell for each limit a step compares: quiet()'s, the rules' and the watchers' earliest;
        # plan()'s, the rules' only; should_stop()'s, the stop watchers' only).
        self._alarm = alarm = port.scope.alarm
        self._quiet_bell, self._plan_bell, self._watch_bell = alarm.bell(), alarm.bell(), alarm.bell()
        self._last: tuple[int, Mapping[str, Any]] | None = None  # the last values published, and their step
        self.sessions, self._run = 0, 0  # sessions in the bus's run number _run
        self._rate: LearningRate | None = None
        #: A training publisher's examples and time outside its steps (:class:`hookbus.publisher_api.Throughput`):
        #: it sets ``throughput.counter`` (the examples trained since its session began, a function of the step)
        #: where it knows the batch size, and, where it sees a framework step begin, ``throughput.sees_start``
        #: and calls ``throughput.step_starts()`` at a step's start while ``throughput.gap_open``. The core
        #: measures the rest on due steps, and each due step's event carries the figures.
        self.throughput = Throughput(None if bus.clock is time.monotonic else bus.clock)
        port.keys.register(self)

    # -- lifecycle ---------------------------------------------------------------------------
    def set_task(self, task: Task | None) -> None:
        """Multi-worker: run the bus as ``task`` (before :meth:`begin`)."""
        self._port.set_task(task)

    def local_subscribers(self) -> list[SubscriberView]:
        """The subscribers that run on this task, in dispatch order: read-only views."""
        return views(self._roster.here)

    @property
    def stops(self) -> Stops:
        """The bus's stops: what the transports across workers read and request through."""
        return self._stops

    def register(self, publisher: Publisher) -> None:
        """Make another publisher's keys known to the bus (the Keras callback's epoch keys)."""
        self._port.keys.register(publisher)

    def hold(self) -> None:
        """Keep deferred work and stop requests waiting until :meth:`release` (a Keras batch's save)."""
        self._dispatcher.hold()

    def release(self) -> None:
        """Run what a :meth:`hold` kept waiting."""
        self._dispatcher.release()

    def when_run_closes(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once when the bus's current run closes (after its subscribers closed): for a
        publisher whose framework may leave without ending it (a Keras ``fit`` that raised calls no
        ``on_train_end``), to undo what it installed for that run."""
        self._scope.when_closed(fn)

    def begin(self) -> None:
        """Publish ``begin`` (checks every subscriber's keys first)."""
        port, scope = self._port, self._scope
        scope.start(self)
        if self.mode == "train":
            scope.link_evaluator()
        self._dispatcher.publish("begin", port.event("begin", step=self.bus.step, mode=self.mode))
        port.system.start()  # after every sink's begin (files open): samples may reach them from now on

    def session_created(self, step: int, restored: bool | None = None, *, in_memory: bool = False) -> None:
        """A session exists at ``step``: reset schedules there and publish the resume point.

        ``restored``: whether the session's model came from a checkpoint (its sinks' states are
        then loaded from beside it); ``None``: past step 0, or a re-created session (the TF1
        hook's rule: a ``MonitoredTrainingSession`` past step 0 restored one; a model restored
        by the user's own code counts too). ``in_memory``: the publisher's model outlives a run
        (the Keras callback, the loop publisher): a run's first session at the step the bus's
        previous run ended at is that model going on (a second ``fit``), a new run and no
        restore, so its sinks start clean.
        """
        scope = self._scope
        flag("restored", restored, allow_none=True)
        flag("in_memory", in_memory)
        if self._run != scope.runs:  # a new run: its first session is not a re-creation of the last run's
            self._run, self.sessions = scope.runs, 0
        self.sessions += 1
        if restored is None:
            continues = in_memory and self.sessions == 1 and scope.previous_step == step
            restored = not continues and (step > 0 or self.sessions > 1)
        self._resume(step, restored, created=True)

    def rewound(self, step: int) -> None:
        """The global step went back under this training publisher in the same session (another task
        restored an older checkpoint: a parameter-server chief restarted while this worker trained):
        re-plan every schedule from ``step`` and publish ``session_created(step, restored=True)``,
        the resume point every sink treats (a CSV drops its rows after ``step``)."""
        self._resume(step, True, created=False)

    def _resume(self, step: int, restored: bool, *, created: bool) -> None:
        """A resume point at ``step``: schedules reset there, ``session_created`` published (after
        ``after_create_session`` when a session was ``created``)."""
        port, scope, publish = self._port, self._scope, self._dispatcher.publish
        rewound = self.mode == "train" and step < self.bus.step
        if self.mode == "train":
            self._state.step = step
            scope.evaluated.resume(step)  # evaluations of later steps count again
            now = self.bus.clock()
            self.throughput.reset(step)  # examples and time outside count from the resume point
            planner = self._planner
            self._version = self._roster.version
            planner.refresh(self._roster.here)
            for record in planner.subs:
                record.timer.reset(step, now)
            self._next_step, self._next_time = planner.find_next_due()
        rate = self._rate
        if rate is not None:
            rate.refresh()
        if created:
            publish("after_create_session", port.event("after_create_session", step=step, mode=self.mode))
        publish(
            "session_created",
            port.event("session_created", step=step, mode=self.mode, restored=restored, rewound=rewound),
        )
        if rate is not None and rate.pending is not None and rate.local:  # a restored multiplier
            self.apply_learning_rate(rate.take(), step)

    def publish_waiting(
        self, state: str, *, until_step: int, step: int, waited_secs: float, timeout_secs: float | None, starts: bool
    ) -> None:
        """Publish ``waiting_for_step`` (:class:`hookbus.sink_api.WaitForStep`, stamped with the bus's wall
        clock): where this worker's start gate is (``EventBusHook(wait_for_step=...)``; a replay, as recorded)."""
        now = self.bus.wall_clock()
        wait = WaitForStep(state, until_step, step, float(waited_secs), timeout_secs, bool(starts), now)
        self._dispatcher.publish("waiting_for_step", wait)

    def offer_checkpoints(self, backend: CheckpointBackend | None, store: CheckpointStore | None = None) -> None:
        """Let checkpoint sinks save this publisher's model through ``backend`` into ``store``, before
        :meth:`begin` (``None`` withdraws it).

        Args:
            backend: Saves and restores the model's variables (:class:`hookbus.publisher_api.CheckpointBackend`).
            store: Where its checkpoints live (:class:`hookbus.publisher_api.CheckpointStore`), required with a
                backend: :class:`hookbus.publisher_api.FileCheckpointStore` for a framework without a layout of
                its own; the TensorFlow publishers give TensorFlow's.

        Raises:
            TypeError: A backend without a store, or a store that is not a ``CheckpointStore``.
        """
        # The bus knows no layout of its own: nothing below the publishers depends on a framework.
        if backend is None:
            self._offers.checkpoints = None
            return
        if not isinstance(store, CheckpointStore):
            raise TypeError(
                f"store must be a hookbus.publisher_api.CheckpointStore (got {store!r}): give the store the "
                "checkpoints live in, e.g. hookbus.publisher_api.FileCheckpointStore('.npz') for a framework "
                "without a layout of its own"
            )
        self._offers.checkpoints = (backend, store)

    def offer_machine(self, offer: MachineOffer | None) -> None:
        """Tell the bus's sampler which GPUs this training publisher's framework uses and how to read
        its allocator (before :meth:`begin`; ``None`` withdraws it: every GPU CUDA shows, no allocator).
        The TensorFlow publishers offer TensorFlow's."""
        self._offers.machine = offer

    def sample_system(self) -> None:
        """Publish one sample of the machine now, on this thread: what the bus's sampler thread
        does every ``system_metrics`` seconds, for a test that needs a sample at a known point.

        Raises:
            RuntimeError: when no run of the bus samples now (``system_metrics=False``, or no
                publisher began yet).
        """
        self._port.system.sample_now()

    def publish_system(self, step: int, values: Mapping[str, Any]) -> None:
        """Publish a recorded sample of the machine (a replay's ``system`` record) on the
        ``system`` signal, at its recorded ``step``, as the sampler published it live: the
        sinks that keep samples (``system=True``) keep it."""
        self._port.system.publish(dict(values), step=step)

    def without_sampling(self) -> contextlib.AbstractContextManager[None]:
        """A context in which runs of the bus sample no machine (a replay: the bus runs on a log's
        recorded time, and the replaying process's machine is not the one that trained)."""
        return _suspended(self._port.system)

    def offer_profiler(self, backend: ProfilerBackend | None) -> None:
        """Let a profiler sink trace windows of steps through ``backend`` (a train publisher, before
        :meth:`begin`; ``None`` withdraws it); the publisher marks its steps through :attr:`profiling`."""
        self._profiling.offer(backend)

    @property
    def profiling(self) -> Profiling:
        """The bus's profiling seam. Around each training step: ``if coming_step >= profiling.first:
        profiling.step_begins(coming_step)`` before it runs, ``if profiling.marking:
        profiling.step_ended(step)`` after (a comparison, and a flag, outside windows)."""
        return self._profiling

    def offer_model(self, view: ModelView | None) -> None:
        """Let sinks see this training publisher's model through ``view`` (a train publisher, before
        :meth:`begin`; ``None`` withdraws it, at its end): one framework-free
        :class:`~hookbus.publisher_api.ModelView` whose members the publisher overrides where it can
        answer them (its weights in memory, its export, variables, graph, configuration, summary,
        the training's parameters, metric directions, epochs and progress); every other member
        answers "not offered".

        Raises:
            TypeError: ``view`` is not a ``ModelView``.
        """
        if view is None:
            self._offers.model = NOT_OFFERED
            return
        if not isinstance(view, ModelView):
            raise TypeError(
                f"view must be a hookbus.publisher_api.ModelView or None (got {view!r}): subclass ModelView "
                "and override the members the publisher can answer"
            )
        self._offers.model = view

    def offer_learning_rate(
        self, backend: RateBackend | None, *, publisher: str = "the publisher"
    ) -> LearningRate | None:
        """Let sinks read and steer the rate this publisher trains with (before :meth:`begin`;
        ``None`` withdraws it); returns the sinks' :class:`~hookbus.sink_api.LearningRate`.

        The same ``backend`` offered again (a hook beginning again, as ``train_and_evaluate``'s
        rounds do) keeps its :class:`LearningRate`: a request made in between, and the multiplier
        in effect, carry over."""
        who = self._dispatcher.current_name  # the subscriber being called: a request's source
        rate = self._rate = offered_rate(self._rate, backend, publisher=publisher, who=who)
        self._offers.learning_rate = rate
        return rate

    @property
    def learning_rate(self) -> LearningRate | None:
        """The rate this publisher offers (:meth:`offer_learning_rate`), or ``None``."""
        return self._rate

    def apply_learning_rate(self, request: RateRequest, step: int, *, source: str | None = None) -> None:
        """Apply a rate request now (before the next training step) and publish ``learning_rate_changed``."""
        assert self._rate is not None
        self._dispatcher.publish("learning_rate_changed", self._rate.apply(request, step, source=source))

    def should_stop(self, read_step: Callable[[], object] | None = None) -> bool:
        """Act on a signal or another thread's stop recorded since the last step, and on a learning-rate
        request (applied now, before the next step); whether to stop.

        Call it on the training thread after every training step (and evaluation). A publisher
        whose step is an estimate passes ``read_step``, a read of the real step that hands it to
        :meth:`advance`: it is called only when a stop is about to be published, so the stop (and
        the checkpoint saved on it) carries the global step, as every step leaving a publisher must.
        """
        stops, rate = self._stops, self._rate
        if not stops.requested and (rate is None or rate.pending is None):  # :meth:`passed`'s flags
            watch_at, bell = stops.watch_at, self._watch_bell
            if watch_at == math.inf or (bell.at == watch_at and not bell.rang):
                return False  # nothing recorded, no watcher due (the timer says so, no clock read)
            if self.bus.clock() < watch_at:
                if bell.at != watch_at:
                    self._arm(bell, watch_at)
                return False  # nothing recorded, no watcher due: what polling would find
        stops.poll(read_step)
        if rate is not None and rate.pending is not None and rate.local:
            self.apply_learning_rate(rate.take(), self.bus.step)
        return self.bus.should_stop

    def advance(self, step: int) -> None:
        """Training reached ``step`` on a step that published nothing (the bus's step follows).

        Publishers report steps here and through :meth:`publish_step`; only the core writes
        the bus's step.
        """
        self._state.step = step

    def count_local_step(self, local_step: int) -> None:
        """Multi-worker: this worker's own training runs so far (``Event.local_step``)."""
        self._state.local_step = local_step

    def end(self, step: int) -> None:
        """Publish ``end`` (after a stop recorded since the last step, if any), then flush every
        sink: what a session wrote is on disk when it ends, also without ``with bus:``."""
        self._stops.poll()
        self._dispatcher.publish("end", self._port.event("end", step=step, mode=self.mode))
        self._port.barrier.flush(step, f"at the end of a session (step {step})")

    # -- planning ----------------------------------------------------------------------------
    def quiet(self, step: int) -> bool:
        """Whether nothing can be due at the coming training step ``step``: no subscriber (:meth:`plan`'s
        first test, the subscribers unchanged since the last plan), no profile window, and no stop watcher
        (``hookbus.publisher_api.Stops.watch_at``); for a publisher's fast path: comparisons, and one clock
        read while a time rule or a watcher is timed. ``False`` says only that :meth:`plan` must decide (and,
        after the step, :meth:`should_stop` check for stops)."""
        if step < self._next_step and step < self._profiling.first and self._version == self._roster.version:
            limit, watch_at = self._next_time, self._stops.watch_at
            if watch_at < limit:
                limit = watch_at
            if limit == math.inf:
                return True
            bell = self._quiet_bell
            if bell.at == limit and not bell.rang:  # the timer has not reached it: no clock read
                return True
            if self.bus.clock() < limit:
                if bell.at != limit:
                    self._arm(bell, limit)
                return True
        return False

    def _arm(self, bell: Bell, limit: float) -> None:
        """Have the run's timer ring ``bell`` at ``limit`` (once per new limit: after a due step);
        on a bus that runs on another clock than the timer's, mark it rung: the clock is read."""
        if self.bus.clock is self._alarm.clock:
            self._alarm.arm(bell, limit)
        else:
            bell.at, bell.rang = limit, True

    def passed(self, step: int) -> bool:
        """A step :meth:`quiet` let through ended at ``step`` (:meth:`advance`); whether nothing waits to
        be acted on now: no stop requested (a signal and another thread set the flag at once) and no
        learning-rate request; the watchers were not due (:meth:`quiet` read the clock). ``False``:
        call :meth:`should_stop`, which acts."""
        self._state.step = step
        rate = self._rate
        return not self._stops.requested and (rate is None or rate.pending is None)

    def plan(self, step: int) -> Plan | None:
        """What to fetch for the coming training step ``step``, or ``None`` if nothing is due.

        Publishes ``before_run`` to the due subscribers that listen to it.
        """
        if self._version != self._roster.version:
            self._version = self._roster.version
            self._planner.refresh(self._roster.here)
            self._next_step, self._next_time = self._planner.find_next_due()
        next_time = self._next_time
        if step < self._next_step:
            if next_time == math.inf:
                return None
            bell = self._plan_bell
            if bell.at == next_time and not bell.rang:  # the timer has not reached it: no clock read
                return None
        now = self.bus.clock()
        if step < self._next_step and now < next_time:
            if self._plan_bell.at != next_time:
                self._arm(self._plan_bell, next_time)
            return None
        planner = self._planner
        due = planner.due(step, now)
        if not due:
            self._next_step, self._next_time = planner.find_next_due()
            return None
        if planner.any_before:
            before = [r for r in due if "before_run" in r.handlers]
            if before:
                event = self._port.event("before_run", step=step, mode=self.mode)
                self._dispatcher.publish("before_run", event, before)
        return planned(step, planner.fetch_keys(due), due, now)

    def publish_step(self, plan: Plan, step: int, raw: Mapping[str, Any]) -> None:
        """Publish ``plan``'s ``after_run`` with the fetched ``raw`` values.

        ``step`` is the real step after the run; subscribers planned for another step are
        re-checked against it.
        """
        due, now = plan._due, plan._now  # what the core kept in its own plan
        if step != plan.step:
            due = [r for r in due if r.timer.is_due(step, now)]
        for record in due:
            record.timer.fire(step, now)
        self._next_step, self._next_time = self._planner.find_next_due()
        self._state.step = step
        if not due:
            return
        throughput = self.throughput
        examples, outside = throughput.due(step)
        self._publish_values(step, raw, due, False, examples, outside)
        dispatcher = self._dispatcher  # its readings of the dispatch's start and end, no more clock reads
        throughput.dispatched(dispatcher.step_began, dispatcher.step_ended)

    def final_plan(self, step: int) -> Plan | None:
        """What the ``at_end`` subscribers still owed a final event at ``step`` need, or ``None``."""
        planner = self._planner
        if self._version != self._roster.version:
            self._version = self._roster.version
            planner.refresh(self._roster.here)
        due = [r for r in planner.subs if not r.disabled and r.timer.is_due_at_end(step)]
        if not due:
            return None
        return planned(step, planner.fetch_keys(due), due, self.bus.clock())

    def last_values(self) -> tuple[int, Mapping[str, Any]] | None:
        """The values of the last step this core published, with that step (``None`` before any).

        What ``at_end`` subscribers get at the end: the end runs no fetch of its own, so a finite
        input that ended with ``OutOfRangeError`` is never asked for another batch.
        """
        return self._last

    def publish_final(self, plan: Plan, raw: Mapping[str, Any], *, step: int | None = None) -> None:
        """Publish the final ``after_run`` (``event.final``) to ``plan``'s ``at_end`` subscribers,
        with ``raw`` from ``step`` (default: the plan's step)."""
        now = self.bus.clock()
        for record in plan._due:
            record.timer.fire(plan.step, now)
        self._publish_values(plan.step if step is None else step, raw, plan._due, True)

    def _publish_values(
        self,
        step: int,
        raw: Mapping[str, Any],
        due: list[Subscriber],
        final: bool,
        examples: int | None = None,
        outside: float | None = None,
    ) -> None:
        values = publishable_values(raw, step)
        if not final:
            self._last = (step, values)
            if self._rate is not None and LEARNING_RATE_KEY in values:
                self._rate.seen(values[LEARNING_RATE_KEY])
        targets = [
            r for r in due if "after_run" in r.handlers and (not r.keys or not r.keys.isdisjoint(values))
        ]  # keys None (all) or empty (the step alone), or one of its keys fetched
        observers = self._planner.observers
        if observers and targets:  # they see what the due subscribers were sent, in dispatch order
            targets = sorted([*targets, *observers], key=_dispatch_order)
        event = self._port.step_event(step, self.mode, MappingProxyType(values), final, examples, outside)
        self._dispatcher.publish("after_run", event, targets)

    # -- evaluation and epochs (:mod:`hookbus._publishing._unscheduled`) -------------------------------------
    def eval_wanted(self) -> bool:
        """Whether any subscriber wants this eval (or test) publisher's keys."""
        if self.mode == "test":
            return test_wanted(self._port, self.bus_keys)
        return eval_wanted(self._port, self.bus_keys)

    def publish_eval(self, step: int, values: Mapping[str, Any]) -> None:
        """Publish one evaluation's aggregated ``values`` as ``eval/<key>`` at training ``step``
        (a test publisher: as ``test/<key>``, ``mode="test"``).

        Evaluations are not scheduled: every subscriber wanting one of the keys receives it.
        One evaluation per training step: an evaluation of a step
        this publisher already published since the resume point before it reaches no subscriber.
        A test evaluation is published every time, never to a sink that steers training
        (:meth:`hookbus.sink_api.Sink` ``controls_training``, a checkpoint sink).
        """
        if self.mode == "test":
            publish_test(self._port, step, values)
        else:
            publish_eval(self._port, self.bus_keys, step, values)

    def publish_epoch(self, step: int, values: Mapping[str, Any]) -> None:
        """Publish an epoch event (``mode="epoch"``; ``values`` keyed ``epoch/<name>`` plus ``epoch``)
        to the subscribers that opt in: those whose ``keys`` name an ``epoch/`` key, and sinks whose
        ``receives_epochs`` is true."""
        publish_epoch(self._port, step, values)


@contextlib.contextmanager
def _suspended(system: SystemMetrics) -> Iterator[None]:
    before, system.suspended = system.suspended, True
    try:
        yield
    finally:
        system.suspended = before
