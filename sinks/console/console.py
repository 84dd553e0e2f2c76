"""ConsoleSink: a live rich dashboard of the run, or plain periodic lines when not on a terminal."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Console

from hookbus.sink_api import (
    SYSTEM_NOTICE_KEY,
    CheckpointSaved,
    EpochProgress,
    Event,
    ExceptionRaised,
    Schedule,
    Sink,
    StopRequest,
    SubscriberError,
    WaitForStep,
    how_ended,
)
from hookbus.validate import flag, key_name, non_negative_seconds, positive_int, positive_number

from ._gate import gate_line
from ._machine import machine_line
from ._render import (
    Dashboard,
    MetricTracker,
    Snapshot,
    best_direction,
    format_value,
    plain_eval_line,
    plain_line,
    plain_summary,
    saved_bests,
)
from ._terminal import TerminalDisplay

if TYPE_CHECKING:
    from rich.console import RenderableType


__all__ = ["ConsoleSink"]

_RATE_SECS = 3.0  # time constant of the steps/second average


class ConsoleSink(Sink):
    """What a person watching the terminal sees: a live dashboard, or plain lines in a log.

    On an interactive terminal a rich ``Live`` display, redrawn ``refresh_per_second`` times a
    second on rich's own thread, shows: the run name, mode, elapsed time, step, steps/second
    (smoothed; beside it examples/second where the publisher counts examples, and the training
    thread's time outside the steps per step: ``Event.examples``, ``Event.outside_secs``) and, when
    an attached sink knows the last step (``total_steps``, e.g. a stop-at-step sink, or a Keras
    ``fit`` of known length: ``epochs × steps_per_epoch``), a progress bar with ETA, and under
    ``fit`` the epoch (``epoch 3/12``, as Keras's progress bar); a table of every scalar key with
    its last value, best value (minimum, maximum for accuracy-like keys) and its step, and a
    sparkline of recent values — for training values the best of those the dashboard was sent on its
    schedule, not of every step, headed ``best seen``; an evaluation table once ``eval/*`` values
    arrive; and a status line with the last checkpoint, the stop reason, the ``status()`` of every
    other attached sink and subscriber errors. The training thread only updates a small state object
    and publishes an immutable snapshot; a slow terminal drops frames, it never slows training.
    While the dashboard runs, ``print`` and logging handlers that write to stdout/stderr
    (TensorFlow's and absl's included) go through the console above it; they are restored exactly on
    close.

    In a Jupyter notebook the dashboard is one output, redrawn in place at the same rate (an
    IPython display updated by id, not rich's ``Live``): the saved notebook holds the frame the
    run ended with; ``print`` and logging stay the notebook's own outputs.

    Elsewhere (a pipe, a file, CI, ``TTY_INTERACTIVE=0``, a dumb terminal) there is no
    ``Live`` and no cursor movement: a line such as
    ``step 100 | loss 0.123 | accuracy 0.97 | 52.3 steps/s`` at most every
    ``plain_every_n_secs``, a line per evaluation, checkpoint and stop, and a summary on close.

    The default schedule is time-based: every ``1 / refresh_per_second`` seconds (0.25 s) and
    at the end, so values are fetched about as often as the screen can show them, not every
    step.

    Args:
        console: Where to draw (default: a new ``rich.console.Console()`` on stdout).
        refresh_per_second: Redraws per second of the live dashboard (default 4).
        run_name: Title of the dashboard (default: the script's file name).
        history: Values kept per key for the sparkline; memory is bounded by it (default 40).
        live: Force the live dashboard (``True``) or plain lines (``False``); default ``None``
            decides at begin: live in a Jupyter notebook, and when rich finds an interactive terminal,
            ``TTY_INTERACTIVE`` is not ``0`` and a real OS stream is a tty (``FORCE_COLOR``
            makes rich take a pipe for a terminal).
        plain_every_n_secs: Least seconds between plain progress lines (default 10; 0: every
            event).
        clock: Monotonic clock for elapsed time, rates and plain-line spacing (default
            :func:`time.monotonic`).
        goals: ``{key: "min" | "max"}`` overriding which direction is best (default: ``max``
            for keys naming acc, auc, precision, recall, f1, iou or map and not loss or error,
            ``min`` otherwise; an ``eval/`` prefix is ignored).
        keys: Keys to show (default ``None``: every scalar key).
        every_n_steps: The schedule (default:
            ``every_n_secs=1 / refresh_per_second, at_end=True``).
        every_n_secs: With ``every_n_steps``, above.
        at_end: With ``every_n_steps``, above.
        on_error: Error policy (default ``"isolate"``).
        name: Shown in reports (default ``"ConsoleSink"``).

    Attributes:
        snapshot: The latest immutable :class:`Snapshot` (what is drawn next).
    """

    default_schedule: ClassVar[Schedule] = Schedule(every_n_secs=0.25, at_end=True)
    #: Multi-worker training: only the chief shows a dashboard (set ``sink.runs_on = "all"`` to change).
    default_runs_on: ClassVar[str] = "chief"
    #: Its summary reports every other subscriber's close (a write that failed, events cut at a deadline).
    closes_last: ClassVar[bool] = True

    def __init__(
        self,
        console: Console | None = None,
        refresh_per_second: float = 4.0,
        *,
        run_name: str | None = None,
        history: int = 40,
        live: bool | None = None,
        plain_every_n_secs: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        goals: Mapping[str, str] | None = None,
        keys: str | Iterable[str] | None = None,
        every_n_steps: int | None = None,
        every_n_secs: float | None = None,
        at_end: bool = True,
        on_error: str | None = None,
        name: str | None = None,
    ) -> None:
        if console is not None and not isinstance(console, Console):
            raise ValueError(f"console must be a rich.console.Console or None (got {console!r})")
        positive_number("refresh_per_second", refresh_per_second)
        positive_int("history", history)
        non_negative_seconds("plain_every_n_secs", plain_every_n_secs)
        flag("live", live, allow_none=True)
        if run_name is not None and not isinstance(run_name, str):
            raise ValueError(f"run_name must be a string or None (got {run_name!r})")
        if not callable(clock):
            raise ValueError(f"clock must be a callable returning seconds (got {clock!r})")
        self.goals = dict(goals or {})
        for key, goal in self.goals.items():
            key_name("goals key", key)
            if goal not in ("min", "max"):
                raise ValueError(f"goals[{key!r}] must be 'min' or 'max' (got {goal!r})")
        if every_n_steps is None and every_n_secs is None:
            every_n_secs = 1.0 / refresh_per_second
        super().__init__(
            keys=keys,
            every_n_steps=every_n_steps,
            every_n_secs=every_n_secs,
            at_end=at_end,
            on_error=on_error,
            name=name,
        )
        self.refresh_per_second = float(refresh_per_second)
        self.run_name = run_name if run_name is not None else (os.path.basename(sys.argv[0] or "") or "run")
        self.history = history
        self.plain_every_n_secs = float(plain_every_n_secs)
        self.clock = clock
        self.display = TerminalDisplay(console, live, self.refresh_per_second, self.renderable)
        self._active = False
        self._snapshot_lock = threading.Lock()
        self._reset(0.0)

    # -- state (training thread) -------------------------------------------------------------
    def _reset(self, now: float) -> None:
        self._start = now
        self._step = 0
        self._mode = "train"
        self._phase = "starting"
        self._rate: float | None = None  # recent: a moving average over about _RATE_SECS
        self._examples_rate: float | None = None  # the same for examples per second, where counted
        self._outside: float | None = None  # and for seconds outside the steps per step
        self._last_rate_point: tuple[int, float, int | None, float | None] | None = None
        self._trained = 0  # steps trained in this run's earlier sessions (for the run's average)
        self._session_start: int | None = None  # the step the current train session began at
        # Examples and seconds outside the steps, per step over the spans the events counted (the
        # run's averages; each event counts from its session's start)
        self._examples_tally = _Tally()
        self._outside_tally = _Tally()
        self._train: dict[str, MetricTracker] = {}
        self._evals: dict[str, MetricTracker] = {}
        self._eval_step: int | None = None
        self._checkpoint: CheckpointSaved | None = None
        self._first_stop: StopRequest | None = None  # the first reason stops the run, as bus.stop_reason
        self._errors: dict[str, int] = {}
        self._resumed: str | None = None
        self._activity: str | None = None  # what happens now, between training steps
        self._failure: str | None = None
        self._sessions = 0  # training sessions seen in this run
        self._progress: EpochProgress | None = None  # the last epoch a training publisher said it is in
        self._last_plain: float | None = None
        self._machine: str | None = None  # the machine line, from the last sample (the sampler's thread)
        self._machine_notice: str | None = None  # why no GPU is sampled: said in the run's first sample
        self.snapshot = Snapshot(self.run_name, taken_at=self._start)

    @property
    def is_live(self) -> bool:
        """Whether the live dashboard is being shown now."""
        return self.display.is_live

    @property
    def console(self) -> Console | None:
        """The rich console the dashboard draws on (made at begin when none was given)."""
        return self.display.console

    def _publish(self) -> Snapshot:
        """Freeze the current state into a new snapshot (what the refresh thread draws)."""
        statuses: list[str] = []
        total: int | None = None
        for peer in self._context.peers() if self._context is not None else ():
            steps = peer.total_steps
            # A sink that knows the last step shows as the header's total and progress bar, not
            # again in the footer; once stopping, the stop line says it all.
            if peer.status and steps is None and self._first_stop is None:
                statuses.append(f"{peer.name}: {peer.status}")
            if steps is not None and steps > 0:
                total = steps if total is None else min(total, steps)
        # Under fit, the epoch and the step it ends at (epochs × steps per epoch), as Keras's
        # progress bar shows them; kept once fit has withdrawn it, for the final frame.
        progress = self._context.model().progress() if self._context is not None else None
        self._progress = progress = progress or self._progress
        if progress is not None and progress.total_steps is not None:
            total = progress.total_steps if total is None else min(total, progress.total_steps)
        now = self.clock()
        with self._snapshot_lock:  # the sampler's thread replaces the snapshot's machine line too
            self.snapshot = self._snapshot(now, total, progress, statuses)
        return self.snapshot

    def _snapshot(self, now: float, total: int | None, progress: EpochProgress | None, statuses: list[str]) -> Snapshot:
        return Snapshot(
            run_name=self.run_name,
            mode=self._mode,
            phase=self._phase,
            running=self._phase in ("starting", "running", "stopping"),
            step=self._step,
            total=total,
            epoch=progress.epoch if progress is not None else None,
            epochs=progress.epochs if progress is not None else None,
            rate=self._rate,
            examples_rate=self._examples_rate,
            outside=self._outside,
            average=self._average(now),
            average_examples=self._average_examples(now),
            average_outside=self._outside_tally.per_step(self._session_start),
            elapsed=now - self._start,
            taken_at=now,
            train=tuple(m.row() for m in self._train.values()),
            evals=tuple(m.row() for m in self._evals.values()),
            eval_step=self._eval_step,
            checkpoint=self._checkpoint,
            stop=self._stop,
            errors=tuple(self._errors.items()),
            statuses=tuple(statuses),
            notes=tuple(note for note in (self._resumed, self._activity, self._failure) if note),
            health=self._context.stats() if self._context is not None else None,
            machine=self._machine,
        )

    def on_system(self, event: Event) -> None:
        """A sample of the machine (on the sampler's thread): the machine line, drawn at once, so a
        stalled run shows its machine (0 % GPU, a flat step) though no step comes."""
        notice = event.values.get(SYSTEM_NOTICE_KEY)
        if isinstance(notice, str):
            self._machine_notice = notice
        line = machine_line(event.values, self._machine_notice)
        with self._snapshot_lock:
            self._machine = line
            self.snapshot = dataclasses.replace(self.snapshot, machine=line)

    @property
    def _stop(self) -> str | None:
        """The stop line: the first stop request's step, reason and source."""
        return None if self._first_stop is None else _stop_line(self._first_stop)

    def _metric(self, table: dict[str, MetricTracker], key: str) -> MetricTracker:
        metric = table.get(key)
        if metric is None:
            metric = table[key] = MetricTracker(key, self.goals.get(key) or best_direction(key), self.history)
        return metric

    def _average(self, now: float) -> float | None:
        """The run's average rate: the steps its train sessions trained over the run's elapsed time."""
        elapsed = now - self._start
        if self._session_start is None or elapsed <= 0:
            return None
        return self._steps_trained() / elapsed

    def _steps_trained(self) -> int:
        """The steps the run's train sessions trained (its earlier sessions' and the current one's)."""
        if self._session_start is None:
            return 0
        return self._trained + max(0, self._step - self._session_start)

    def _average_examples(self, now: float) -> float | None:
        """The run's examples per second, where its publisher counts examples: the examples per step its
        events counted, times the steps its train sessions trained, over the run's elapsed time (as
        :meth:`_average` for steps; the dashboard may not be due at a session's last step)."""
        elapsed = now - self._start
        per_step = self._examples_tally.per_step(self._session_start)
        if elapsed <= 0 or per_step is None:
            return None
        return per_step * self._steps_trained() / elapsed

    def _measure_rate(self, event: Event) -> None:
        """Steps, examples (where the publisher counts them) per second, and the time outside the steps per
        step, over the span since the last train event: moving averages over about ``_RATE_SECS``."""
        now, step, examples, outside = self.clock(), event.step, event.examples, event.outside_secs
        if examples is not None:
            self._examples_tally.seen(examples, step)
        if outside is not None:
            self._outside_tally.seen(outside, step)
        if self._last_rate_point is not None:
            last_step, last_time, last_examples, last_outside = self._last_rate_point
            dt = now - last_time
            if dt <= 0 or step < last_step:
                return
            weight = 1.0 - math.exp(-dt / _RATE_SECS)
            self._rate = _moved(self._rate, (step - last_step) / dt, weight)
            if examples is not None and last_examples is not None and examples >= last_examples:
                self._examples_rate = _moved(self._examples_rate, (examples - last_examples) / dt, weight)
            if outside is not None and last_outside is not None and step > last_step:
                self._outside = _moved(self._outside, max(0.0, outside - last_outside) / (step - last_step), weight)
        self._last_rate_point = (step, now, examples, outside)

    # -- signals -----------------------------------------------------------------------------
    def on_begin(self, event: Event) -> None:
        if not self._active:
            self._reset(self.clock())
            self._active = True
            self._phase = "running"
            self._publish()
            self.display.start(on_exit=self.close)
        self._publish()

    def on_session_created(self, event: Event) -> None:
        if event.mode == "eval":
            # An evaluation session restored a checkpoint; its values arrive at its end.
            self._activity = f"evaluating checkpoint {event.step:,}"
            self._publish()
            return
        if event.mode != "train":
            return
        self._sessions += 1
        if self._session_start is not None:  # what the session before this one trained
            self._trained += max(0, self._step - self._session_start)
            self._examples_tally.session_ended(self._session_start)
            self._outside_tally.session_ended(self._session_start)
        self._session_start = event.step
        self._activity = None
        self._last_rate_point, self._rate = None, None  # a resume point: the rate starts anew
        self._examples_rate = self._outside = None
        # Say "resumed" only for what a user did or must know: a run that starts from an earlier
        # run's checkpoint, or a session re-created behind the step reached (a recoverable error).
        # Training rounds that continue where this run was (train_and_evaluate) are not resumes.
        if event.rewound:
            self._resumed = f"rewound to step {event.step:,} (session re-created)"
            self._plain(self._resumed)
        elif self._sessions == 1 and event.restored and event.step > 0:
            self._resumed = f"resumed from step {event.step:,}"
            self._plain(self._resumed)
        self._step = event.step
        self._publish()

    def on_waiting_for_step(self, event: WaitForStep) -> None:
        # A worker's start gate: a status line while it waits, a line as it begins and ends.
        line = gate_line(event)
        self._activity = line if event.state == "waiting" else None
        if event.state != "waiting" or event.waited_secs == 0:
            self._plain(line)
        self._step = max(self._step, event.step)
        self._publish()

    def on_after_run(self, event: Event) -> None:
        if event.mode == "test":
            self._tested(event)
            return
        self._mode = event.mode
        if event.mode == "eval":
            self._eval_step = event.step
            self._step = max(self._step, event.step)  # the header never lags the evaluation it shows
            self._activity = None
            for key, value in event.values.items():
                if isinstance(value, float):
                    self._metric(self._evals, key).update(event.step, value)
            snap = self._publish()
            self._plain(plain_eval_line(snap))
            return
        self._measure_rate(event)
        self._step = event.step
        for key, value in event.values.items():
            if isinstance(value, float):
                self._metric(self._train, key).update(event.step, value)
        snap = self._publish()
        now = self.clock()
        if not self.display.is_live and (self._last_plain is None or now - self._last_plain >= self.plain_every_n_secs):
            self._last_plain = now
            self._plain(plain_line(snap))

    def _tested(self, event: Event) -> None:
        """A test evaluation (``model.evaluate`` outside ``fit``): its ``test/`` values beside the
        validation's, and a line of its own; no step of training, so no rate and no mode change."""
        self._eval_step = event.step
        self._step = max(self._step, event.step)
        self._activity = None
        scalars = [(key, value) for key, value in event.values.items() if isinstance(value, float)]
        for key, value in scalars:
            self._metric(self._evals, key).update(event.step, value)
        self._publish()
        pairs = [f"{key} {format_value(value)}" for key, value in scalars]
        self._plain(" | ".join([f"test at step {event.step}", *pairs]))

    def on_checkpoint_saved(self, event: CheckpointSaved) -> None:
        self._checkpoint = event
        value = "" if event.value is None else f" (value {event.value:.4g})"
        self._plain(f"checkpoint step {event.step}{value}: {event.path}")
        self._publish()

    def on_stop_requested(self, event: StopRequest) -> None:
        if self._first_stop is None:
            self._first_stop = event
            self._plain(_stop_line(event))
            # The header shows the step the stop happened at, also when the last due step was earlier.
            self._step = max(self._step, event.step)
        self._phase = "stopping"
        self._publish()

    def on_end(self, event: Event) -> None:
        if event.mode == "train":
            self._step = max(self._step, event.step)  # the step training ended at: header and footer agree
            self._mode = "train"  # fit's last validation is part of its last epoch: training ended
            self._publish()

    def on_subscriber_error(self, event: SubscriberError) -> None:
        self._errors[event.subscriber] = event.count
        if event.count == 1:
            # A writer's error names its sink first ("CSVSink: background write failed"): once is enough.
            message = str(event.error).removeprefix(f"{event.subscriber}: ")
            self._plain(
                f"error in {event.subscriber} on {event.signal} at step {event.step}: "
                f"{type(event.error).__name__}: {message} (on_error={event.policy})"
            )
        self._publish()

    def on_exception(self, event: ExceptionRaised) -> None:
        self._phase = how_ended(self._first_stop, event.error)  # stopped (KeyboardInterrupt) or crashed
        self._step = max(self._step, event.step)
        detail = f": {event.error}" if str(event.error) else ""
        self._failure = f"{self._phase} at step {event.step:,}: {type(event.error).__name__}{detail}"
        self._activity = None
        self._publish()

    # -- state across a resume ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Each key's best value and its step, saved beside a checkpoint: after a resume the
        dashboard's "best" is the run's best (as early stopping's restored best), not the
        best since the restart."""
        return {"train": saved_bests(self._train.values()), "eval": saved_bests(self._evals.values())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (keys not seen yet get a row with their best)."""
        for table, saved in ((self._train, state.get("train")), (self._evals, state.get("eval"))):
            for key, (best, step) in (saved or {}).items():
                self._metric(table, key).restore_best(float(best), int(step))
        self._publish()

    # -- output ------------------------------------------------------------------------------
    def renderable(self) -> RenderableType:
        """The dashboard as it would be drawn now (what the live display shows)."""
        try:
            now = self.clock()
        except Exception:  # called from rich's refresh thread: never raise there
            now = self.snapshot.taken_at
        return Dashboard(self.snapshot, now)

    def _plain(self, line: str) -> None:
        if self._active:
            self.display.print(line)

    def close(self) -> None:
        """Stop the dashboard and restore the terminal and logging (idempotent).

        Draws the final frame (live) or prints the summary (plain).
        """
        if not self._active:
            return
        self._active = False
        if self._phase in ("starting", "running", "stopping"):
            self._phase = how_ended(self._first_stop, None)  # an exception set the phase already
        self.display.stop(plain_summary(self._publish()))


def _stop_line(stop: StopRequest) -> str:
    return f"stop at step {stop.step:,}: {stop.reason} ({stop.source})"


class _Tally:
    """A running total that each event gives since its session began (examples trained, seconds outside
    the steps), summed over a run's sessions with the steps it covers: per step over what was counted."""

    __slots__ = ("_last", "_last_step", "_steps", "_total")

    def __init__(self) -> None:
        self._total, self._steps = 0.0, 0  # the ended sessions'
        self._last: float | None = None  # the current session's last total, and the step it was given at
        self._last_step = 0

    def seen(self, total: float, step: int) -> None:
        self._last, self._last_step = total, step

    def session_ended(self, start: int) -> None:
        """The session that began at ``start`` ended: its last total counts, over the steps it covered."""
        if self._last is not None and self._last_step > start:
            self._total += self._last
            self._steps += self._last_step - start
        self._last = None

    def per_step(self, start: int | None) -> float | None:
        """Per step over every session's counted steps (the current one began at ``start``); ``None``
        where nothing was counted."""
        total, steps = self._total, self._steps
        if self._last is not None and start is not None and self._last_step > start:
            total, steps = total + self._last, steps + self._last_step - start
        return total / steps if steps > 0 else None


def _moved(average: float | None, value: float, weight: float) -> float:
    """``average`` moved ``weight`` of the way to ``value`` (``value`` itself when there is none yet)."""
    return value if average is None else average + weight * (value - average)
