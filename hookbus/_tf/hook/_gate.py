"""The start gate: a parameter-server worker waits for a global step before it trains.

``GlobalStepWaiterHook``'s job (workers started gradually, so that the first steps, which the
chief takes alone, shape the model before every worker pushes gradients), done by
:class:`hookbus.EventBusHook` (``wait_for_step=N``) with what TensorFlow's hook lacks: a
timeout (``on_timeout="start"`` trains anyway, ``"raise"`` fails with :exc:`TimeoutError`),
stops honoured while waiting (the cluster's stop flag, SIGTERM, a first Ctrl-C, another
thread's request) and the wait published as ``waiting_for_step`` (:class:`hookbus.sink_api.WaitForStep`),
which the dashboard shows and the event log records.

It is the publisher's, not a sink's: the wait needs the session, and each poll is the hook's
own read of the parameter server's stop flag and the global step (one ``session.run`` of two
variable reads, no input consumed, no extra session). Only non-chief workers of a
parameter-server cluster wait: the chief moves the step they wait for, and one machine has no
one else to move it. ``always_wait=True`` waits wherever the hook runs, as
``GlobalStepWaiterHook`` does (it waits on any process it is given): on the chief or one machine
something else must move the step (another process or thread training on the same variables);
there the poll reads the step alone (no shared stop flag), and stops still end the wait.
Workers that train in lockstep (``MultiWorkerMirroredStrategy``) cannot wait at all: every
step is an all-reduce over every worker, so one worker's wait would stall the others for ever;
the hook refuses it before training.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hookbus._rules._validate import flag, non_negative_int, one_of, optional_seconds, positive_number

if TYPE_CHECKING:
    from hookbus._contract._cluster import Task

__all__ = ["ON_TIMEOUT", "StartGate", "staggered_start", "start_gate"]

ON_TIMEOUT = ("start", "raise")
#: Seconds between two reads of the step, as TensorFlow's hook (a read costs one round trip to the PS).
POLL_SECS = 0.5
#: Seconds between two ``waiting`` publications while the wait lasts (a dashboard, a log's liveness).
PROGRESS_SECS = 5.0

_LOCKSTEP = (
    "its workers train in lockstep (MultiWorkerMirroredStrategy: every step is an all-reduce over every "
    "worker), so a worker waiting for a global step would stall the others for ever; drop wait_for_step"
)

#: ``(stop flag value, global step)`` read in one ``session.run``.
Read = Callable[[], "tuple[Any, int]"]
Report = Callable[..., None]


def staggered_start(steps: float) -> Callable[[Task], int]:
    """A ``wait_for_step`` that starts workers gradually: ``int(steps * log(position + 1))``.

    TensorFlow's suggestion for ``GlobalStepWaiterHook`` (``K * log(task_id + 1)``, the chief
    being 0): ``position`` counts the training tasks chief first (a ``"chief"`` job's chief is
    0 and its workers 1, 2, ...; without one, worker ``i`` is ``i``), so every task of a cluster
    waits for its own step and the later ones a little longer each.

    Args:
        steps: ``K``, a positive number of steps.
    """
    k = positive_number("steps", steps)

    def wait_for_step(task: Task) -> int:
        position = task.index + 1 if task.has_chief_job and task.type == "worker" else task.index
        return int(k * math.log(position + 1))

    wait_for_step.__qualname__ = f"staggered_start({steps!r})"
    return wait_for_step


def start_gate(
    wait_for_step: int | Callable[[Task], int] | None,
    *,
    timeout_secs: float | None,
    on_timeout: str,
    task: Task | None,
    mode: str,
    always: bool = False,
) -> StartGate | None:
    """Check the hook's gate arguments (at construction); the gate this task waits at, or ``None``.

    ``None`` without ``wait_for_step``, for a step 0, and, unless ``always``, on the chief and on
    one machine (no task): nobody else moves the step there. A function of the task
    (:func:`staggered_start`) is called here (without a task there is no position: no wait).

    Raises:
        ValueError: naming the argument: a negative or non-int step (or one the function
            returned), an ``on_timeout`` other than ``"start"`` / ``"raise"``, a timeout that is
            not a positive number of seconds, gate options without ``wait_for_step``, an eval
            hook, or a task of a collective (lockstep) strategy.
    """
    one_of("on_timeout", on_timeout, ON_TIMEOUT)
    always = bool(flag("always_wait", always))
    timeout = optional_seconds("wait_timeout_secs", timeout_secs)
    if wait_for_step is None:
        if timeout is not None or on_timeout != "raise" or always:
            raise ValueError(
                "wait_timeout_secs, on_timeout and always_wait apply to the start gate: give wait_for_step too"
            )
        return None
    if mode != "train":
        raise ValueError("wait_for_step delays training: it takes mode='train'")
    if task is not None and task.collective:
        raise ValueError(f"wait_for_step is refused for task {task.suffix}: {_LOCKSTEP}")
    if callable(wait_for_step):
        if task is None:  # one machine: no position to stagger by, and no wait
            return None
        until = wait_for_step(task)
        what = f"wait_for_step({task.suffix}) (from {getattr(wait_for_step, '__qualname__', wait_for_step)})"
        until = non_negative_int(what, until)
    else:
        try:
            until = non_negative_int("wait_for_step", wait_for_step)
        except ValueError:
            raise ValueError(
                f"wait_for_step must be a non-negative int (a global step) or a function of the task, "
                f"e.g. hookbus.staggered_start(10) (got {wait_for_step!r})"
            ) from None
    if until == 0 or (not always and (task is None or task.is_chief)):
        return None
    return StartGate(until, timeout, on_timeout, task, anywhere=always)


class StartGate:
    """One worker's wait for ``until_step``, polled through the hook's read of the stop flag and step.

    Args:
        until_step: The global step to wait for.
        timeout_secs: The longest wait (``None``: as long as it takes, a stop still ends it).
        on_timeout: ``"start"`` (train anyway) or ``"raise"`` (:exc:`TimeoutError`).
        task: This worker (named in messages), ``None`` on one machine.
        anywhere: Whether it waits wherever it runs (``always_wait``): then the global step may be
            anywhere, and without a shared stop flag the poll reads the step alone.
        clock, sleep: Injected for tests (default :func:`time.monotonic`, :func:`time.sleep`).
    """

    def __init__(
        self,
        until_step: int,
        timeout_secs: float | None,
        on_timeout: str,
        task: Task | None,
        *,
        anywhere: bool = False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.until_step = until_step
        self.timeout_secs = timeout_secs
        self.on_timeout = on_timeout
        self.task = task
        self.anywhere = anywhere
        self.clock = clock
        self.sleep = sleep
        self._fetch: dict[str, Any] = {}

    def build(self, flag: Any, global_step: Any) -> None:
        """At begin: poll ``flag`` (the shared stop's read; ``None`` without one) and ``global_step``
        (a plain read, not one ordered after the train op, which would run it).

        Raises:
            ValueError: before training, for no global step, or (unless :attr:`anywhere`) a global
                step that is not on a parameter server: other workers do not move it there, a
                collective (lockstep) strategy's.
        """
        if global_step is None:
            raise ValueError("wait_for_step waits for the global step: the graph has none (create one)")
        device = str(global_step.device)
        if not self.anywhere and "/job:ps" not in device:
            raise ValueError(
                f"wait_for_step needs the global step on a parameter server (it is on {device!r}): {_LOCKSTEP}"
            )
        self._fetch = {"step": global_step} if flag is None else {"stop": flag, "step": global_step}

    def wait_in(self, session: Any, observe: Callable[[Any], None], stopped: Callable[[], bool], report: Report) -> int:
        """:meth:`wait`, reading through ``session`` what :meth:`build` named (one run per poll)."""
        fetch = self._fetch

        def read() -> tuple[Any, int]:
            got = session.run(fetch)
            return got.get("stop"), int(got["step"])

        return self.wait(read, observe, stopped, report)

    def wait(self, read: Read, observe: Callable[[Any], None], stopped: Callable[[], bool], report: Report) -> int:
        """Poll until the step reaches :attr:`until_step`, a stop, or the timeout; the last step read.

        ``read`` returns the stop flag and the step; ``observe`` turns a flag into a stop
        request; ``stopped`` says whether the run stops (any source); ``report`` publishes
        (:meth:`hookbus.publisher_api.PublisherCore.publish_waiting`'s arguments). Nothing is published when
        the step is already reached or the run already stops.

        Raises:
            TimeoutError: on timeout with ``on_timeout="raise"`` (after publishing ``timed_out``).
        """
        start = self.clock()
        flag, step = read()
        observe(flag)
        if step >= self.until_step or stopped():
            return step
        timeout, until = self.timeout_secs, self.until_step

        def publish(state: str, waited: float, starts: bool = False) -> None:
            report(state, until_step=until, step=step, waited_secs=waited, timeout_secs=timeout, starts=starts)

        publish("waiting", 0.0)
        reported = start
        while True:
            waited = self.clock() - start
            left = math.inf if timeout is None else timeout - waited
            self.sleep(max(0.0, min(POLL_SECS, left)))
            flag, step = read()
            observe(flag)
            now = self.clock()
            waited = now - start
            if stopped():  # a stop wins over a step reached in the same poll: this worker trains nothing
                publish("stopped", waited)
                return step
            if step >= until:
                publish("reached", waited, starts=True)
                return step
            if timeout is not None and waited >= timeout:
                starts = self.on_timeout == "start"
                publish("timed_out", waited, starts=starts)
                if not starts:
                    who = self.task.suffix if self.task is not None else "this process"
                    raise TimeoutError(
                        f"{who} waited {waited:.1f} s for global step {until} and the global step is "
                        f"still {step}: is the chief training? (wait_timeout_secs={timeout:g}, on_timeout='raise'; "
                        "on_timeout='start' trains anyway)"
                    )
                return step
            if now - reported >= PROGRESS_SECS:
                publish("waiting", waited)
                reported = now
