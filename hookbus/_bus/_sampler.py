"""The machine sampled on its own clock: a thread per run that reads the machine and publishes
``system`` events (a part of :class:`hookbus.EventBus`).

Why the samples are delivered on the sampler's thread, not the training thread's: a sample must go
out while training is stalled (a hung input pipeline, a step that takes minutes), when the
training thread is inside the framework and reaches no step boundary; samples queued for the next
step would arrive after the stall, all at once, and a stall would look like nothing. So the
sampler calls the ``system`` handlers itself, in dispatch order, with a loop of its own that
touches none of the dispatcher's state (the event in progress, deferred work, pending stops:
the training thread's). The ``system`` signal's contract says so: a handler runs on the sampler's
thread, beside the training thread, and must only hand the sample on to something made for that
(a writer's queue, a lock, one assignment the dashboard's refresh reads); the built-in sinks do.
A stop asked from a handler is recorded, and the training thread acts on it at its next step.

The thread starts when the run's first publisher began (its ``begin`` reached every sink) and stops
at the run's close, before any sink closes: it takes a last sample (so a run shorter than the
interval still has one), shuts NVML down and is joined within a deadline; after that deadline it
delivers nothing more (the sinks are closing). A handler's error follows its ``on_error``:
isolated or disabled there, logged once; under ``"raise"`` it is raised by the run's close.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from hookbus._contract._events import Event
from hookbus._contract._system import SYSTEM_MODE, SYSTEM_NOTICE_KEY, SYSTEM_SIGNAL

if TYPE_CHECKING:
    import blinker

    from hookbus._bus._machine import Machine
    from hookbus._bus._roster import Roster
    from hookbus._bus._state import RunState
    from hookbus._bus._stops import Stops
    from hookbus._contract._system import MachineOffer

__all__ = ["STOP_DEADLINE", "Sampler", "SystemMetrics"]

logger = logging.getLogger("hookbus.system")  # its own name: a program can quiet the notice alone

#: Seconds the run's close waits for the sampler's last sample and its thread's end.
STOP_DEADLINE = 5.0
THREAD_NAME = "hookbus-system-metrics"


class Sampler:
    """Reads ``machine`` every ``interval`` seconds on a thread of its own and gives each sample's
    values to ``deliver``; :meth:`sample_now` does the same at once on the caller's thread.

    Args:
        interval: Seconds between samples.
        machine: The reader (opened on the first sample, closed when the thread ends).
        deliver: Called with each sample's values (the first carries the notice, if any).
        wait: Waits on the stop event for up to the interval; whether it was set (injectable:
            ``threading.Event.wait`` by default).
    """

    def __init__(
        self,
        interval: float,
        machine: Machine,
        deliver: Callable[[dict[str, Any]], None],
        *,
        wait: Callable[[threading.Event, float], bool] | None = None,
    ) -> None:
        self.interval = interval
        self._machine = machine
        self._deliver = deliver
        self._wait = wait or (lambda event, secs: event.wait(secs))
        self._lock = threading.Lock()  # one reading and delivery at a time (the thread, sample_now)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._opened = False
        self._notice: str | None = None
        self._closed = False  # after stop: nothing is delivered any more
        #: Samples delivered so far.
        self.samples = 0

    @property
    def alive(self) -> bool:
        """Whether the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (daemon: a process that ends without closing its run is not held)."""
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._lock:
                self._open()  # now: the first sample's CPU figures cover the time since the start
            while not self._wait(self._stopping, self.interval):
                self.sample_now()
            self.sample_now()  # the last: a run shorter than the interval has one too
        except Exception:  # a reading that failed: say so, never take the process down
            logger.exception("sampling the machine failed; no more samples in this run")
        finally:
            with self._lock:
                self._machine.close()

    def sample_now(self) -> None:
        """Read the machine and deliver the sample now, on this thread (nothing after :meth:`stop`)."""
        with self._lock:
            if self._closed:
                return
            self._open()
            values: dict[str, Any] = {}
            notice, self._notice = self._notice, None
            if notice is not None:
                values[SYSTEM_NOTICE_KEY] = notice  # said once: in the first sample
            values.update(self._machine.read())
            self._deliver(values)
            self.samples += 1

    def _open(self) -> None:
        """Open the reader once (under the lock); its notice waits for the first sample."""
        if not self._opened:
            self._opened = True
            self._notice = self._machine.open()
            if self._notice is not None:  # in the first sample always; in the log as a warning where it is news
                level = logging.WARNING if self._machine.worrying else logging.INFO
                logger.log(level, "system metrics: %s", self._notice)

    def stop(self, deadline: float = STOP_DEADLINE) -> bool:
        """Take the last sample and end the thread within ``deadline`` seconds; whether it ended.
        Idempotent. A thread that did not end delivers nothing more."""
        thread = self._thread
        self._stopping.set()
        ended = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(deadline)
            ended = not thread.is_alive()
            if not ended:
                logger.warning(
                    "the system-metrics sampler did not end within %.0f s (a reading or a sink's "
                    "'system' handler hangs); it delivers nothing more",
                    deadline,
                )
        self._closed = True
        if thread is None:
            with self._lock:
                self._machine.close()
        return ended


class SystemMetrics:
    """The bus's part that samples the machine per run and publishes ``system`` events.

    Args:
        interval: Seconds between samples, or ``None``: off.
        roster: Who is subscribed (the ``system`` handlers of those here, in dispatch order).
        state: The run's progress (the latest step a sample carries).
        stops: Where a stop a handler asks for is recorded.
        signal: The raw ``system`` signal, sent after the subscribers.
        sender: What raw receivers get as the sender (the bus).
        clock, wall_clock: The bus's clocks.
        offered: What the training publisher's framework offers (its GPUs, its allocator), read
            as the run starts sampling.
        machine: Makes a run's :class:`~hookbus._bus._machine.Machine` from that offer (default:
            psutil and NVML).

    Attributes:
        suspended: Whether runs sample nothing for now (a replay: the bus runs on recorded time).
        sampler: This run's :class:`Sampler`, ``None`` when off or between runs.
    """

    def __init__(
        self,
        interval: float | None,
        *,
        roster: Roster,
        state: RunState,
        stops: Stops,
        signal: blinker.NamedSignal,
        sender: object,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        offered: Callable[[], MachineOffer | None] = lambda: None,
        machine: Callable[[MachineOffer | None], Machine] | None = None,
    ) -> None:
        self.interval = interval
        self._roster = roster
        self._state = state
        self._stops = stops
        self._signal = signal
        self._sender = sender
        self._clock = clock
        self._wall_clock = wall_clock
        self._offered = offered
        self._machine = machine
        self.suspended = False
        self.sampler: Sampler | None = None
        self._errors: list[Exception] = []

    def start(self) -> None:
        """The run's first publisher began: sample from now on (no-op when off or running)."""
        if self.interval is None or self.suspended or self.sampler is not None:
            return
        offer = self._offered()
        if self._machine is None:
            from hookbus._bus._machine import Machine

            gpus, allocator = (None, None) if offer is None else (offer.gpus, offer.allocator)
            machine = Machine(tf_gpus=gpus, allocator=allocator)
        else:
            machine = self._machine(offer)
        self._errors = []
        self.sampler = Sampler(self.interval, machine, self.publish)
        self.sampler.start()

    def stop(self) -> list[Exception]:
        """The run closes: the last sample, the thread joined within its deadline. Returns the
        errors of ``on_error="raise"`` handlers, for the close to raise."""
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.stop()
        errors, self._errors = self._errors, []
        return errors

    def sample_now(self) -> None:
        """Publish a sample now, on this thread (tests; :func:`hookbus.testing.sample_system`).

        Raises:
            RuntimeError: when no run samples (off, or no publisher began).
        """
        if self.sampler is None:
            raise RuntimeError(
                "no run samples the machine now: sampling starts when the run's first publisher "
                "begins, on a bus made with system_metrics on (the default)"
            )
        self.sampler.sample_now()

    def publish(self, values: dict[str, Any], step: int | None = None) -> None:
        """Deliver one sample to the ``system`` subscribers here, then to raw receivers (on the
        sampler's thread; see the module's docstring for why). ``step``: the step it carries
        (a replayed sample's recorded one; default the latest the run reached)."""
        state, task = self._state, self._roster.task
        fields: dict[str, Any] = {}
        if task is not None:
            fields.update(task_type=task.type, task_index=task.index, local_step=state.local_step)
        event = Event(
            SYSTEM_SIGNAL,
            state.step if step is None else step,
            SYSTEM_MODE,
            MappingProxyType(values),
            self._wall_clock(),
            state.elapsed(self._clock()),
            _stop=self._stop,
            **fields,
        )
        for record in tuple(self._roster.here):
            handler = record.handlers.get(SYSTEM_SIGNAL)
            if handler is None or record.disabled:
                continue
            try:  # not timed into bus.stats(): its counters are the training thread's
                handler(event)
            except Exception as error:
                # "raise": not called again; the error is raised by the run's close.
                record.failed(disable=record.on_error in ("disable", "raise"))
                if record.errors == 1 or record.on_error == "disable":
                    logger.error(
                        "subscriber %r raised while handling 'system' on the sampler's thread (on_error=%r%s)",
                        record.name,
                        record.on_error,
                        "; it is disabled" if record.on_error == "disable" else "; further errors are counted",
                        exc_info=error,
                    )
                if record.on_error == "raise":
                    self._errors.append(error)
        if self._signal.receivers:
            try:
                self._signal.send(self._sender, event=event)
            except Exception:  # a raw receiver has no policy: report it, keep sampling
                logger.exception("a raw receiver of 'system' raised")

    def _stop(self, reason: str, step: int) -> None:
        self._stops.request(reason, step=step, source="system metrics")
