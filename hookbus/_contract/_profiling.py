"""The profiling seam: windows of global steps a sink asks for, step markers the publisher sets.

The policy — which steps, how traces are named, what the dashboard says — is the sink's
(:class:`~hookbus.sinks.ProfilerSink`); the profiler's calls are the training publisher's
:class:`ProfilerBackend` (TensorFlow's is :class:`hookbus._tf._profiler_tf.TFProfiler`), so no sink
imports TensorFlow. Between them is the bus's :class:`Profiling`, one per bus: the sink hands it a
:class:`ProfileWindow` (:attr:`hookbus.sink_api.SinkContext.profiler`); around each training step the
publisher compares the coming step with :attr:`Profiling.first` (``inf`` while no window is
asked for) and only inside a window calls :meth:`Profiling.step_begins` / :meth:`Profiling.step_ended`,
which start the profiler, wrap the step in a step marker with its global step, and save the
trace once the window's last step ran. Outside windows nothing is called: no profiler, no marker.

Run traces are the other kind (``ProfilerHook``'s timelines): one training run traced in full by
the session itself. A sink asks from its ``before_run`` handler (:meth:`Profiling.trace_run`); a
publisher that offers them (:meth:`Profiling.offer_run_traces`, the TF1 hook) reads
:attr:`Profiling.run_trace_wanted` after planning the run, runs it with full tracing and hands the
:class:`RunTrace` over (:meth:`Profiling.run_traced`) before publishing the step, so the sink takes
it (:meth:`Profiling.run_trace`) in its ``after_run`` handler, only when it is due at the step the
run really reached.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from hookbus._rules._validate import flag

__all__ = [
    "RunTrace",
    "ProfileOptions",
    "ProfileResult",
    "ProfileWindow",
    "Profiler",
    "ProfilerBackend",
    "ProfilerBusy",
    "Profiling",
]

logger = logging.getLogger("hookbus")


@dataclass(frozen=True)
class ProfileOptions:
    """What the profiler traces (TensorFlow's ``ProfilerOptions``, without its delay).

    Attributes:
        host_tracer_level: CPU activity: 1 critical only, 2 info (default), 3 verbose.
        python_tracer_level: Python function calls: 0 off (default), 1 on.
        device_tracer_level: GPU/TPU activity: 0 off, 1 on (default).
    """

    host_tracer_level: int = 2
    python_tracer_level: int = 0
    device_tracer_level: int = 1


class ProfilerBusy(RuntimeError):
    """Another profiler session is running in this process (the user's own, TensorFlow's profiler
    server, Keras's ``TensorBoard(profile_batch=...)``): only one may run at a time."""


class ProfilerBackend(Protocol):
    """The profiler calls a training publisher offers (``PublisherCore.offer_profiler``)."""

    def start(self, logdir: str, options: ProfileOptions) -> None:
        """Start tracing for a trace to be saved under ``logdir``.

        Raises:
            ProfilerBusy: Another profiler session is running.
        """
        ...

    def mark(self, step: int) -> None:
        """Open the step marker of the training step that will reach global step ``step``."""
        ...

    def unmark(self) -> None:
        """Close the step marker :meth:`mark` opened."""
        ...

    def stop(self, logdir: str, run: str) -> str:
        """Stop tracing and save the trace as ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``
        (``run`` taken with a suffix if it exists); returns the run directory written."""
        ...

    def discard(self) -> None:
        """Stop tracing and save nothing."""
        ...


@dataclass(frozen=True)
class ProfileResult:
    """What came of a :class:`ProfileWindow`, handed to its ``done``.

    Attributes:
        steps: The global steps profiled, each wrapped in its step marker (empty if none).
        path: The run directory the trace was saved to, or ``None`` when none was.
        problem: Why nothing was saved (``None`` when a trace was): another profiler was
            running, no training publisher offers profiling, the training passed the window
            without running its steps here, or saving failed.
        why: What ended it: ``"window end"``, or what :meth:`Profiling.finish` was told
            (a stop, the end, an exception, a new session).
    """

    steps: tuple[int, ...]
    path: str | None
    problem: str | None
    why: str


@dataclass(frozen=True)
class ProfileWindow:
    """The global steps ``first`` .. ``last`` to profile into ``logdir``, as one trace.

    Attributes:
        first, last: The window's first and last global step (both profiled).
        logdir: Where the trace goes (``<logdir>/plugins/profile/<run>/``).
        options: What is traced.
        run_name: The trace's run directory name for the steps it holds, first and last profiled.
        done: Called once on the training thread when the window ends, with its result.
    """

    first: int
    last: int
    logdir: str
    options: ProfileOptions
    run_name: Callable[[int, int], str]
    done: Callable[[ProfileResult], None]


class RunTrace(Protocol):
    """One training run traced in full, as the publisher that ran it hands it over."""

    @property
    def step(self) -> int:
        """The global step the traced run reached."""
        ...

    def chrome_trace(self, *, show_dataflow: bool, show_memory: bool) -> str:
        """The run's ops as Chrome trace JSON (``chrome://tracing``, Perfetto): TensorFlow's
        ``timeline.Timeline`` format, with flow events between producers and consumers
        (``show_dataflow``) and tensor lifetimes and sizes (``show_memory``)."""
        ...

    def serialized(self) -> bytes:
        """The run's metadata serialized (TensorFlow's ``RunMetadata``), as TensorBoard's graph tab
        reads it from an event's tagged run metadata."""
        ...


class Profiler(Protocol):
    """Profiling as the bus offers it to one sink (:attr:`hookbus.sink_api.SinkContext.profiler`)."""

    @property
    def offered(self) -> bool:
        """Whether the training publisher offers profiling (a TensorFlow publisher that began)."""
        ...

    @property
    def window(self) -> ProfileWindow | None:
        """The window asked for and not ended yet."""
        ...

    @property
    def tracing(self) -> bool:
        """Whether the profiler is tracing the window's steps now."""
        ...

    def profile(self, window: ProfileWindow) -> None:
        """Profile ``window`` (a window still open is finished first, as ``"replaced"``)."""
        ...

    def finish(self, why: str) -> None:
        """End the open window now: a trace in progress is stopped and saved (``done`` is called
        with ``why``); a window not begun is dropped without a call."""
        ...

    @property
    def run_traces_offered(self) -> bool:
        """Whether the training publisher traces single runs in full (the TF1 hook)."""
        ...

    def trace_run(self) -> None:
        """Trace the coming training run in full (call it from a ``before_run`` handler); a
        session's first run is never traced."""
        ...

    def run_trace(self) -> RunTrace | None:
        """The trace of the run just published (call it from an ``after_run`` handler), or ``None``
        when it was not traced."""
        ...


class Profiling:
    """The bus's side of profiling: the window asked for, the publisher's backend, the markers.

    Attributes:
        first: The first step of the window asked for, ``inf`` without one: a publisher calls
            :meth:`step_begins` only for a coming step at or past it.
        marking: Whether a step marker is open: a publisher calls :meth:`step_ended` only then.
    """

    def __init__(self) -> None:
        self.first: float = math.inf
        self.marking = False
        self._backend: ProfilerBackend | None = None
        self._window: ProfileWindow | None = None
        self._tracing = False
        self._steps: list[int] = []
        self.run_trace_wanted = False
        self._run_traces = False
        self._run_trace: RunTrace | None = None

    # -- the publisher's side --------------------------------------------------------------------
    def offer(self, backend: ProfilerBackend | None) -> None:
        """Profile through ``backend`` (a train publisher, as it begins); ``None`` withdraws it.
        A trace in progress through the backend withdrawn is saved first: its profiler never
        keeps running after its publisher ended."""
        if backend is not self._backend and (self._tracing or self.marking):
            self.finish("the publisher ended")
        self._backend = backend

    @property
    def offered(self) -> bool:
        return self._backend is not None

    @property
    def window(self) -> ProfileWindow | None:
        return self._window

    def step_begins(self, step: int) -> None:
        """The coming training step reaches global ``step`` (at or past :attr:`first`): start the
        profiler at the window's first step, then open the step's marker."""
        window, backend = self._window, self._backend
        if window is None:
            return
        if backend is None:
            self._close("no training publisher offers profiling (a TensorFlow publisher must begin)", "not offered")
            return
        if not self._tracing:
            if step > window.last:
                self._close(f"training passed steps {window.first}–{window.last} without running them here", "passed")
                return
            try:
                backend.start(window.logdir, window.options)
            except Exception as error:  # a profiler already running, an unwritable logdir: skip, never a crash
                self._close(f"{type(error).__name__}: {error}", "not started")
                return
            self._tracing = True
        backend.mark(step)
        self.marking = True
        self._steps.append(step)

    def step_ended(self, step: int) -> None:
        """The marked step ran and reached global ``step``: close its marker; save the trace
        after the window's last step."""
        if self.marking and self._backend is not None:
            self._backend.unmark()
        self.marking = False
        if self._steps and step != self._steps[-1]:
            self._steps[-1] = step  # the step it really reached (parameter-server training moves it)
        window = self._window
        if window is not None and step >= window.last:
            self._save("window end")

    def offer_run_traces(self, offered: bool) -> None:
        """Whether the training publisher traces a run in full when :attr:`run_trace_wanted` (a
        train publisher, as it begins; ``False`` withdraws it)."""
        self._run_traces = bool(flag("offered", offered))
        self.run_trace_wanted, self._run_trace = False, None

    def run_traced(self, trace: RunTrace | None) -> None:
        """The wanted run ran (``trace``: its trace, ``None`` if it carried none): before its step is
        published. The request is answered: the next run is traced only when asked again."""
        self.run_trace_wanted, self._run_trace = False, trace

    # -- the sink's side -------------------------------------------------------------------------
    @property
    def run_traces_offered(self) -> bool:
        return self._run_traces

    def trace_run(self) -> None:
        self._run_trace = None
        self.run_trace_wanted = self._run_traces

    def run_trace(self) -> RunTrace | None:
        return self._run_trace

    def profile(self, window: ProfileWindow) -> None:
        if self._window is not None:
            self.finish("replaced")
        self._window, self._steps = window, []
        self.first = window.first

    @property
    def tracing(self) -> bool:
        return self._tracing

    def finish(self, why: str) -> None:
        if self.marking:  # a step that did not complete (it raised, or the loop ended before it)
            if self._backend is not None:
                self._backend.unmark()
            self.marking = False
            self._steps.pop()
        if self._tracing and not self._steps:  # no step of the window completed: nothing to show
            self._tracing = False
            try:
                if self._backend is not None:
                    self._backend.discard()
            except Exception:  # stopping a profiler must not break training
                logger.warning("stopping the profiler failed", exc_info=True)
        if self._tracing:
            self._save(why)
        else:
            self._window, self._steps, self.first = None, [], math.inf

    # -- ending a window ---------------------------------------------------------------------------
    def _save(self, why: str) -> None:
        window, backend, steps = self._window, self._backend, tuple(self._steps)
        assert window is not None
        self._tracing = False
        path: str | None = None
        problem: str | None = None
        if backend is None:
            problem = "the training publisher withdrew profiling before the trace was saved"
        else:
            try:
                path = backend.stop(window.logdir, window.run_name(steps[0], steps[-1]))
            except Exception as error:  # a full disk: the trace is lost, training goes on
                problem = f"saving the trace failed: {type(error).__name__}: {error}"
        self._end(window, ProfileResult(steps, path, problem, why))

    def _close(self, problem: str, why: str) -> None:
        window = self._window
        assert window is not None
        self._end(window, ProfileResult((), None, problem, why))

    def _end(self, window: ProfileWindow, result: ProfileResult) -> None:
        self._window, self._steps, self.first = None, [], math.inf
        try:
            window.done(result)  # may ask for the next window
        except Exception:  # the sink's report must not break the training step
            logger.exception("the profiler sink failed to take its window's result %r", result)
