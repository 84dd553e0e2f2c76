"""ProfilerSink: TensorFlow profiler traces of windows of global steps (``ProfilerHook``'s job)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hookbus.sink_api import ProfileOptions, ProfileResult, ProfileWindow, Sink
from hookbus.validate import non_empty_path, optional_positive_int, positive_int

if TYPE_CHECKING:
    from hookbus.sink_api import Event, ExceptionRaised, SinkContext

__all__ = ["ProfileReport", "ProfilerSink", "next_window"]

logger = logging.getLogger("hookbus")


def next_window(start_step: int, num_steps: int, every_n_steps: int | None, after: int) -> tuple[int, int] | None:
    """The first window ``(first, last)`` with steps past ``after``, cut to begin after it, or ``None``.

    Windows are ``start_step + k × every_n_steps`` .. ``+ num_steps - 1`` (``k = 0`` only, without
    ``every_n_steps``), in global steps.
    """
    span = num_steps - 1
    first = start_step
    if every_n_steps is not None:  # the first window ending past `after`
        first += every_n_steps * max(0, -(-(after + 1 - start_step - span) // every_n_steps))
    last = first + span
    if last <= after:
        return None
    return max(first, after + 1), last


@dataclass(frozen=True)
class ProfileReport:
    """What a :class:`ProfilerSink` did in its run (:attr:`ProfilerSink.report`).

    Attributes:
        saved: The run directories of the traces saved, in order.
        skipped: One line per window that was not traced, saying why (another profiler running, ...).
    """

    saved: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


class ProfilerSink(Sink):
    """Traces windows of global steps with TensorFlow's profiler, for TensorBoard's Profile tab.

    The steps are the publisher's global steps (``event.step``, the step after the run) for the
    TF1 hook, the Keras callback and the loop publisher alike, not Keras's per-epoch batch
    indices. Window ``k`` is steps ``start_step + k × every_n_steps`` .. ``+ num_steps - 1``
    (only ``k = 0`` without ``every_n_steps``). A session's first step (a fresh start, a resume,
    a re-created session) is never profiled — it traces and builds graphs, not the training's
    compute — so a window holding it begins at the step after; the profiler is warmed up once
    before its first trace, as Keras's ``TensorBoard(profile_batch=...)`` does.

    Each profiled step is wrapped in TensorFlow's step marker
    (``tf.profiler.experimental.Trace("train", step_num=<global step>, _r=1)``), so the profile
    plugin's overview page and step-time graph work for TF1 sessions and custom loops too. Each
    window is one trace, ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``, with ``run`` =
    ``<local time>_steps_<first>-<last>`` plus ``_<task type>_<task index>`` in multi-worker
    training: two windows in one second, or two workers on one host, never overwrite each other
    (a name taken already gets a ``_2`` suffix). View them with
    ``tensorboard --logdir <logdir>`` (Profile tab; ``pip install tensorboard-plugin-profile``).

    Outside windows it costs nothing: it is never due (no fetch), and the publisher calls no
    profiler and sets no marker; one comparison per step. A trace in progress is stopped and
    saved at a stop (its steps so far), at the end, on an exception and when a new session
    starts. A profiler already running (the user's own, TensorFlow's profiler server, Keras's
    ``TensorBoard(profile_batch=...)``) skips the window with a warning — in the log, in
    :attr:`report` and on the dashboard — and training goes on. The dashboard shows
    ``profiling steps 500–509`` while tracing and the TensorBoard command once a trace is saved.

    Args:
        logdir: The TensorBoard log directory the traces go under.
        start_step: The first window's first global step (default 10).
        num_steps: Steps per window (default 5).
        every_n_steps: Repeat the window every n steps (default ``None``: one window); at least
            ``num_steps``.
        host_tracer_level: CPU activity traced: 1 critical only, 2 info (default), 3 verbose.
        python_tracer_level: 1 also traces Python function calls (default 0: off).
        device_tracer_level: 1 traces GPU/TPU activity (default), 0 does not. The three levels
            go to ``tf.profiler.experimental.ProfilerOptions``; TensorFlow 2.21's Python API
            ignores them (it logs ``... expects an i value``) and traces with its defaults.
        name: Name in reports (default the class name).
        runs_on: Where it runs in multi-worker training (default ``"all"``: every worker traces
            its own steps, each trace named after its task).

    Raises:
        ValueError: for a value out of range, named with what was expected, at construction.
    """

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        start_step: int = 10,
        num_steps: int = 5,
        every_n_steps: int | None = None,
        *,
        host_tracer_level: int = 2,
        python_tracer_level: int = 0,
        device_tracer_level: int = 1,
        name: str | None = None,
        runs_on: str | None = None,
    ) -> None:
        self.logdir = non_empty_path("logdir", logdir)
        self.start_step = positive_int("start_step", start_step)
        self.num_steps = positive_int("num_steps", num_steps)
        self.every_n_steps = optional_positive_int("every_n_steps", every_n_steps)
        if self.every_n_steps is not None and self.every_n_steps < self.num_steps:
            raise ValueError(
                f"every_n_steps must be at least num_steps={self.num_steps} (windows must not overlap) "
                f"(got {self.every_n_steps})"
            )
        self.options = ProfileOptions(
            _level("host_tracer_level", host_tracer_level, (1, 2, 3)),
            _level("python_tracer_level", python_tracer_level, (0, 1)),
            _level("device_tracer_level", device_tracer_level, (0, 1)),
        )
        super().__init__(name=name, runs_on=runs_on)
        self.report = ProfileReport()
        self._status: str | None = None
        self._asked: tuple[int, int] | None = None  # the window asked for last
        self._clock: Callable[[], float] = time.time

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        self.report = ProfileReport()  # a run's sinks start clean
        self._status = None

    # -- windows ---------------------------------------------------------------------------------
    def on_session_created(self, event: Event) -> None:
        if event.mode != "train":
            return  # an evaluation's session: training's window goes on
        profiler = self.context.profiler
        profiler.finish(f"a new session at step {event.step}")
        # The session's first step (event.step + 1) is never profiled.
        self._ask(event.step + 1)

    def _ask(self, after: int) -> None:
        window = next_window(self.start_step, self.num_steps, self.every_n_steps, after)
        if window is None:
            return
        first, last = self._asked = window
        self.context.profiler.profile(ProfileWindow(first, last, self.logdir, self.options, self._run_name, self._done))

    def _run_name(self, first: int, last: int) -> str:
        stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(self._clock()))  # TensorFlow's run names
        task = self.context.task
        return f"{stamp}_steps_{first}-{last}" + (f"_{task.type}_{task.index}" if task is not None else "")

    def _done(self, result: ProfileResult) -> None:
        steps = _steps(result.steps)
        if result.path is not None:
            self.report = ProfileReport((*self.report.saved, result.path), self.report.skipped)
            self._status = f"trace of steps {steps} saved: tensorboard --logdir {self.logdir} (Profile tab)"
            logger.info(
                "%s: trace of steps %s saved to %s; view it with tensorboard --logdir %s (Profile tab)",
                self.name,
                steps,
                result.path,
                self.logdir,
            )
        else:
            line = f"steps {_steps(self._asked or ())} not profiled: {result.problem}"
            self.report = ProfileReport(self.report.saved, (*self.report.skipped, line))
            self._status = line
            logger.warning("%s: %s", self.name, line)
        if result.why in ("window end", "not started", "passed") and self._asked is not None:
            # The next window (every_n_steps); a stop, the end or a new session asks for none.
            self._ask(max((self._asked[1], *result.steps)))

    # -- the end ---------------------------------------------------------------------------------
    def on_end(self, event: Event) -> None:
        self.context.profiler.finish(f"the end at step {event.step}")

    def on_exception(self, event: ExceptionRaised) -> None:
        self.context.profiler.finish(f"an exception: {type(event.error).__name__}")

    def close(self) -> None:
        context = self._context
        if context is not None:
            context.profiler.finish("the run closed")

    def status(self) -> str | None:
        """``profiling steps 500–509`` while tracing; the TensorBoard command once a trace is saved."""
        context = self._context
        window = context.profiler.window if context is not None else None
        if window is not None and context is not None and context.profiler.tracing:
            return f"profiling steps {window.first}–{window.last}"
        return self._status


def _steps(steps: tuple[int, ...]) -> str:
    return f"{steps[0]}–{steps[-1]}" if steps else "(none)"


def _level(name: str, value: object, allowed: tuple[int, ...]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))} (got {value!r})")
    return value
