"""The sink interface: the Sink base class, the signals, and the checks of a subscriber's settings."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from hookbus._contract._cluster import check_runs_on
from hookbus._contract._schedule import Schedule
from hookbus._rules._validate import key_items, key_name, one_of

if TYPE_CHECKING:
    from types import TracebackType

    from hookbus._contract._context import SinkContext
    from hookbus._contract._events import (
        CheckpointSaved,
        Event,
        ExceptionRaised,
        ModelExported,
        StopRequest,
        SubscriberError,
        WaitForStep,
    )
    from hookbus._contract._learning_rate import LearningRateChange
    from hookbus._contract._stats import WriterStats

__all__ = [
    "ON_ERROR_POLICIES",
    "PRIORITY_CHECKPOINT",
    "PRIORITY_DEFAULT",
    "PRIORITY_EARLY_STOPPING",
    "PRIORITY_NAN_GUARD",
    "PRIORITY_STOP_AT_STEP",
    "SIGNALS",
    "STEP_SIGNALS",
    "Sink",
]

#: Every signal a bus publishes, in lifecycle order.
SIGNALS: tuple[str, ...] = (
    "begin",
    "after_create_session",
    "session_created",
    "waiting_for_step",
    "before_run",
    "after_run",
    "end",
    "stop_requested",
    "subscriber_error",
    "exception",
    "checkpoint_saving",
    "checkpoint_saved",
    "learning_rate_changed",
    "model_exported",
    "system",
)
#: Signals that follow the subscribers' schedules; the others are delivered every time.
STEP_SIGNALS: frozenset[str] = frozenset({"before_run", "after_run"})
ON_ERROR_POLICIES = ("raise", "isolate", "disable")

#: Lower runs first. Control sinks run before the checkpoint, which runs before the rest.
PRIORITY_NAN_GUARD = 0
PRIORITY_EARLY_STOPPING = 10
PRIORITY_STOP_AT_STEP = 20
PRIORITY_CHECKPOINT = 50
PRIORITY_DEFAULT = 100


def check_on_error(value: object) -> str:
    return one_of("on_error", value, ON_ERROR_POLICIES)


def check_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"priority must be an int (got {value!r})")
    return value


def check_keys(value: object, argument: str = "keys") -> frozenset[str] | None:
    if value is None:
        return None
    keys = key_items(argument, value, "a key, a list of keys or None")
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"{argument} must be non-empty strings (got {value!r})")
    return frozenset(key_name("key", k) for k in keys)  # type: ignore[arg-type]


class Sink:
    """Base class for a subscriber with state: override the ``on_<signal>`` methods you need.

    Every overridden ``on_<signal>`` method is subscribed when the sink is attached
    (``bus.attach(sink)``). ``on_before_run`` and ``on_after_run`` follow the sink's schedule;
    the other signals (``begin``, ``session_created``, ``end``, ``stop_requested``, ...) are
    delivered every time. Each method receives the signal's payload. This docstring is the
    reference for writing a sink (README "Guides and reference"); every name a sink needs
    (this class, its context, schedules, priorities, the events, the writer kit, the shared
    rules) is in :mod:`hookbus.sink_api`, the module the built-in sinks are written on::

        class PrintLoss(hookbus.sink_api.Sink):
            default_schedule = hookbus.sink_api.Schedule(every_n_steps=50)

            def __init__(self, **kwargs):
                super().__init__(keys=["loss"], **kwargs)

            def on_after_run(self, event):
                print(event.step, event.values["loss"])

        sink = bus.attach(PrintLoss())        # bus.detach(sink) removes it
        with bus.on("after_run", print, every_n_secs=10):   # a temporary function subscriber
            ...

    Override any ``on_<signal>`` method; ``state_dict()`` / ``load_state_dict()`` for state that
    must survive a restart, ``flush()`` for writers, ``close()`` for resources.
    :mod:`hookbus.testing` drives a bus with scripted steps and values (no TensorFlow) for
    testing sinks.

    A sink that writes files owns a :class:`hookbus.sink_api.WriterKit` and keeps only its format: the kit
    checks the path and the options (``flush_secs``, ``max_queue_size``, ``close_deadline``,
    ``flush_deadline``) when the sink is made, makes the directory and takes one lock per output
    at begin, starts the run's :class:`hookbus.sink_api.BackgroundWriter` (or adopts a writer with a thread
    of its own as a :class:`hookbus.sink_api.OwnThreadWriter`, as ``TensorBoardSink`` does), and gives
    ``flush()`` within the flush deadline, ``stats()`` that outlive the run and an idempotent
    ``close()`` that releases the locks: the sink's ``flush``, ``writer_stats`` and ``close``
    call them.

    Events are data: an event carries its step, mode, task, values and ``request_stop(reason)``,
    not the bus. What else a sink may use it finds in ``self.context``, a
    :class:`hookbus.sink_api.SinkContext` the bus gives every sink as the run begins (before ``begin``):
    the clock, the task, the publishers' keys and shapes, ``defer(fn)`` (run after the event
    reached every subscriber), ``reschedule(schedule)``, the other sinks' status lines
    (``peers()``), the training publisher's view of its model (``model()``: its weights, export,
    variables, which way a metric goes, whether it ends epochs, ...), and ``checkpoints``
    (a :class:`hookbus.sink_api.Checkpoints`: the checkpoint barrier, the pointer and the publisher's
    checkpoint store, for checkpoint sinks and the sinks that read a checkpoint). A sink never
    sees another sink; sinks cooperate through this interface, which the bus runs:

    - ``flush()``: the checkpoint barrier: everything up to the step handed to the OS (a failing
      flush disables an isolating sink; the checkpoint is still saved).
    - ``writer_stats()``: ``bus.stats()``: rows its background writer was given, wrote and holds
      (:class:`hookbus.WriterStats`).
    - ``state_dict()`` / ``load_state_dict()``: saved beside each checkpoint by sink name, loaded
      back on resume.
    - ``checkpoint_veto(step)`` with ``controls_training = True``: control sinks only: refuse a
      checkpoint (the NaN guard on a non-finite step).
    - ``status()``, ``total_steps``: the dashboard's status line and progress.
    - ``receives_epochs``: the Keras callback's epoch events, whatever the sink's keys
      (``CSVSink(epochs=True)``; early stopping, to report a monitor an epoch ended without).
    - ``passive = True``: observe only: every step event published for the others, with their
      values; never planned, adds no key to any fetch (``EventLogSink``).
    - ``checkpoint_directory``: publishers resume from it.
    - ``closes_last = True``: closed after every other subscriber (a summary of the run's health).

    A stop a sink (or any thread) asks for is acted on by the training thread: ``request_stop``
    from a watchdog thread is recorded, and the publisher stops — with the final checkpoint — at
    its next step.

    Args:
        keys: Keys this sink needs (default ``None``: every key). On a due step the publisher
            fetches the union of the due subscribers' keys; the sink receives an ``after_run``
            event only when it carries at least one of its keys. A sink that needs only the step
            (stop at a step, save a checkpoint) may set ``self.keys = frozenset()`` after this
            ``__init__``: it adds no key to any fetch and receives its due steps' events with
            whatever was fetched for the others.
        every_n_steps: The schedule (see :class:`Schedule`).
            When none is given the class's ``default_schedule`` applies.
        every_n_secs: With ``every_n_steps``, above.
        at_begin: With ``every_n_steps``, above.
        at_end: With ``every_n_steps``, above.
        priority: Order among subscribers, lower first (default: the class's ``priority``).
        on_error: ``"raise"``, ``"isolate"`` or ``"disable"`` (default: the class's).
        name: Shown in reports (default: the class name).
        runs_on: Where it runs in multi-worker training: ``"chief"``, ``"all"`` or ``"each"``
            (every worker, output suffixed ``worker-<i>``; sinks with a path only). Default: the
            class's ``default_runs_on`` (``"all"``; ``"chief"`` for the console, TensorBoard,
            CSV and checkpoint sinks). Ignored on one machine. Can also be set as an attribute
            before the sink is attached.
    """

    default_schedule: ClassVar[Schedule] = Schedule(every_n_steps=1)
    default_runs_on: ClassVar[str] = "all"
    #: Under a collective strategy (``MultiWorkerMirroredStrategy``), whether this sink's work
    #: must run on every worker whatever ``runs_on`` says (checkpoint saves: TensorFlow's rule).
    joins_collectives: ClassVar[bool] = False
    #: Whether this sink steers training (stops it, guards it). Only such sinks may veto a
    #: checkpoint (:meth:`checkpoint_veto`); the NaN guard, early stopping and stop-at-step are.
    controls_training: ClassVar[bool] = False
    #: Whether this sink only observes: it receives every ``after_run`` event published for the
    #: other subscribers (train, eval, epoch and at-end events), with whatever values were
    #: fetched for them, and is never planned itself: its keys and schedule add nothing to any
    #: fetch, so it costs no extra ``session.run`` work (``EventLogSink``). Default ``False``.
    passive: ClassVar[bool] = False
    #: Whether this sink reports on the others as the run closes (the dashboard's summary): it is
    #: closed after every other subscriber, so that what their closes failed or cut (a background
    #: write that failed, events a background subscriber never received) is in its report.
    #: Default ``False``: sinks close in dispatch order.
    closes_last: ClassVar[bool] = False
    priority: int = PRIORITY_DEFAULT
    on_error: str = "isolate"
    _context: SinkContext | None = None

    def __init__(
        self,
        *,
        keys: str | Iterable[str] | None = None,
        every_n_steps: int | None = None,
        every_n_secs: float | None = None,
        at_begin: bool = False,
        at_end: bool = False,
        priority: int | None = None,
        on_error: str | None = None,
        name: str | None = None,
        runs_on: str | None = None,
    ) -> None:
        given = Schedule(every_n_steps, every_n_secs, at_begin, at_end)
        self.schedule = self.default_schedule if given == Schedule() else given
        self.keys = check_keys(keys)
        if priority is not None:
            self.priority = check_priority(priority)
        if on_error is not None:
            self.on_error = check_on_error(on_error)
        self.name = name if name is not None else type(self).__name__
        if runs_on is not None:
            self.runs_on = runs_on

    @property
    def runs_on(self) -> str:
        """Where this sink runs in multi-worker training (see the class docstring)."""
        return str(self.__dict__.get("_runs_on", self.default_runs_on))

    @runs_on.setter
    def runs_on(self, value: str) -> None:
        value = check_runs_on(value)
        if value == "each" and type(self).set_output_suffix is Sink.set_output_suffix:
            raise ValueError(
                f"runs_on='each' needs a sink with an output path to suffix per worker (CSVSink, "
                f"TensorBoardSink); {type(self).__name__} has none: use 'chief' or 'all'"
            )
        self.__dict__["_runs_on"] = value

    def setup(self, context: SinkContext) -> None:
        """Receive what this sink may use of its bus for the run (the bus calls it as the run
        begins, before ``begin`` is published). Override to prepare; call ``super().setup``.

        A run's sinks start clean: a sink that remembers across events (a best value, a wait,
        a position) forgets it here, once per run. Its state comes back only from a checkpoint
        (:meth:`load_state_dict`), so a second ``fit`` on the same bus is a new run, not a resume.
        """
        self._context = context

    @property
    def context(self) -> SinkContext:
        """The :class:`hookbus.sink_api.SinkContext` of the current run (clock, keys, checkpoint backend, ...)."""
        if self._context is None:
            raise RuntimeError(
                f"{self.name} has no context yet: a bus gives it when the run begins (attach the sink, then train)"
            )
        return self._context

    @property
    def checkpoint_directory(self) -> str | None:
        """The directory this sink saves checkpoints to, if it does (default ``None``).

        Publishers that resume (``restore=True``) restore from it.
        """
        return None

    @property
    def receives_epochs(self) -> bool:
        """Whether this sink receives the Keras callback's epoch events even with ``keys=None``
        (default ``False``; ``CSVSink(epochs=True)`` does). See :meth:`Subscriber.wants_epochs`."""
        return False

    def writer_stats(self) -> WriterStats | None:
        """How this sink's background writer keeps up, for :meth:`hookbus.EventBus.stats`
        (default ``None``: no writer). Writers override it; it must be cheap and never block."""
        return None

    def set_output_suffix(self, suffix: str) -> None:
        """Write to a per-worker path ending in ``suffix`` (``runs_on="each"``; called before begin).

        Sinks with an output path override it; the base has no path.
        """
        raise TypeError(f"{type(self).__name__} has no output path to suffix with {suffix!r}")

    def handlers(self) -> dict[str, Callable[[Any], None]]:
        """The bound ``on_<signal>`` methods this sink overrides, by signal name.

        Raises:
            TypeError: when the sink cannot be wired as written, before the run: its class did
                not run ``Sink.__init__``, a method looks like a misspelled handler
                (``on_after_runs``), or a handler does not take exactly the event.
        """
        cls = type(self)
        if "name" not in vars(self) or "schedule" not in vars(self):
            raise TypeError(
                f"{cls.__name__}.__init__ did not run hookbus.sink_api.Sink.__init__ (it sets the name, schedule and "
                "keys): call super().__init__(...) in it"
            )
        expected = [f"on_{signal}" for signal in SIGNALS]
        for attribute in dir(cls):
            if attribute.startswith("on_") and attribute not in expected:
                close = difflib.get_close_matches(attribute, expected, n=1, cutoff=0.8)
                if close:
                    raise TypeError(
                        f"{cls.__name__}.{attribute} looks like a misspelled handler (did you mean {close[0]}?); "
                        f"the handlers are {', '.join(expected)}. Helpers need a name further from these"
                    )
        found: dict[str, Callable[[Any], None]] = {}
        for signal in SIGNALS:
            method = getattr(cls, f"on_{signal}", None)
            if method is not None and method is not getattr(Sink, f"on_{signal}", None):
                bound = getattr(self, f"on_{signal}")
                try:
                    inspect.signature(bound).bind(None)
                except TypeError:
                    raise TypeError(
                        f"{cls.__name__}.on_{signal} must take exactly one argument, the event "
                        f"(got {cls.__name__}.on_{signal}{inspect.signature(bound)})"
                    ) from None
                except ValueError:  # no signature to read (a builtin): trust it
                    pass
                found[signal] = bound
        return found

    # The handlers a subclass may override. Only overridden ones are subscribed, so a sink
    # that ignores a signal costs nothing when it is published.
    def on_begin(self, event: Event) -> None:
        """A publisher began (before any session)."""

    def on_after_create_session(self, event: Event) -> None:
        """A session was created (``event.step``)."""

    def on_session_created(self, event: Event) -> None:
        """A (re)created session is a resume point at ``event.step`` (``event.restored``)."""

    def on_waiting_for_step(self, event: WaitForStep) -> None:
        """A worker waits for a global step before it trains (``event.state``; its start gate)."""

    def on_before_run(self, event: Event) -> None:
        """A due training step is about to run (scheduled)."""

    def on_after_run(self, event: Event) -> None:
        """A due step ran (scheduled), or an evaluation finished (``event.mode == "eval"``; a test
        evaluation, ``"test"``, reaches a sink with ``keys=None`` or naming a ``test/`` key, never one
        that steers training: ``controls_training`` or a ``checkpoint_directory``)."""

    def on_end(self, event: Event) -> None:
        """A publisher ended cleanly."""

    def on_stop_requested(self, event: StopRequest) -> None:
        """A subscriber or a signal asked to stop."""

    def on_subscriber_error(self, event: SubscriberError) -> None:
        """Another subscriber raised."""

    def on_exception(self, event: ExceptionRaised) -> None:
        """Training raised; :meth:`close` follows."""

    def on_checkpoint_saving(self, event: CheckpointSaved) -> None:
        """A checkpoint is about to be saved at ``event.path`` (before the barrier flushes the writers)."""

    def on_checkpoint_saved(self, event: CheckpointSaved) -> None:
        """A checkpoint became visible."""

    def on_learning_rate_changed(self, event: LearningRateChange) -> None:
        """A new learning rate was applied (``SinkContext.learning_rate``)."""

    def on_model_exported(self, event: ModelExported) -> None:
        """An export for serving moved into place (:class:`~hookbus.sinks.ExportSink`)."""

    def on_system(self, event: Event) -> None:
        """A sample of the machine (``event.mode == "system"``; values keyed as
        :mod:`hookbus.sink_api` ``SYSTEM_*`` names them), every ``system_metrics`` seconds.

        Called on the bus's sampler thread, never on the training thread (so samples go on while a
        step or the input pipeline stalls), beside the training thread's calls of the other
        handlers: override it only to hand the sample on to something safe across threads (a
        writer's queue, a lock, one assignment a refresh reads). ``event.step`` is the latest
        training step the bus knows.
        """

    def state_dict(self) -> dict[str, Any]:
        """State to save beside a checkpoint (default: none)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Restore what :meth:`state_dict` returned (default: nothing to restore)."""

    def flush(self) -> None:  # noqa: B027 - optional hook
        """Block until everything received so far is handed to the OS (checkpoint barrier).

        Writers override it; the bus calls it on every live sink before a checkpoint becomes
        visible. If it raises, a sink whose policy isolates errors is disabled and the
        checkpoint is saved without it.
        """

    def checkpoint_veto(self, step: int) -> str | None:
        """Why a checkpoint of ``step`` must not be saved, or ``None`` (default) to allow it.

        Asked at the checkpoint barrier, only of sinks with ``controls_training = True`` (the
        NaN guard refuses a step at or after a non-finite value).
        """
        return None

    def status(self) -> str | None:
        """A short line for dashboards (e.g. ``"patience 2/5"``), or ``None`` (default)."""
        return None

    @property
    def total_steps(self) -> int | None:
        """The step at which this sink will stop the run, if it knows (default ``None``)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. The bus calls it once at the end of the run, also after errors."""

    def __enter__(self) -> Sink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
