"""The evaluator task: evaluate each new checkpoint training leaves, stop training, end with it.

TensorFlow's estimator layout runs evaluation as its own task, outside the cluster, on the
checkpoints in a shared directory. Estimator's early stopping then had to read the evaluator's
event files on the chief, and left the evaluator polling for checkpoints forever. Here the
evaluator's own subscribers decide (``EarlyStoppingSink(monitor="eval/loss")``), a stop record in
the checkpoint directory carries the decision to training (:mod:`hookbus._checkpoints._run_files`), and an end
record written when training's run closes ends the evaluator after the last checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from hookbus._checkpoints._run_files import RunFiles
from hookbus._checkpoints._store import step_of
from hookbus._rules._validate import optional_positive_int, optional_seconds, seconds
from hookbus._tf._import import require_tensorflow

if TYPE_CHECKING:
    from hookbus._bus._bus import EventBus

__all__ = ["evaluate_checkpoint", "evaluate_checkpoints"]

logger = logging.getLogger("hookbus")


def evaluate_checkpoint(
    checkpoint: str, *, eval_fetches: Any, eval_hooks: Sequence[Any], eval_steps: int | None, scaffold: Any, config: Any
) -> None:
    """One evaluation: a ``MonitoredSession`` restored from ``checkpoint`` runs ``eval_fetches``
    ``eval_steps`` times (``None``: until the input ends); the eval hooks publish at its end."""
    tf = require_tensorflow("evaluation")
    creator = tf.compat.v1.train.ChiefSessionCreator(
        checkpoint_filename_with_path=checkpoint, scaffold=scaffold, config=config
    )
    with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=eval_hooks) as session:
        batches = 0
        while not session.should_stop() and (eval_steps is None or batches < eval_steps):
            session.run(eval_fetches)
            batches += 1


def evaluate_checkpoints(
    bus: EventBus,
    *,
    eval_fetches: Any,
    checkpoint_dir: str,
    eval_hooks: Sequence[Any],
    eval_steps: int | None = None,
    poll_secs: float = 1.0,
    timeout_secs: float | None = None,
    scaffold: Any = None,
    config: Any = None,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Evaluate every new checkpoint of ``checkpoint_dir`` until training ends; the evaluations run.

    Each time a checkpoint newer than the last one evaluated appears, a ``MonitoredSession``
    restores it and runs ``eval_fetches`` ``eval_steps`` times (default ``None``: until the input
    ends); an eval :class:`EventBusHook` in ``eval_hooks`` publishes ``eval/<key>`` at that
    checkpoint's step. When a subscriber on this bus asks to stop (early stopping on ``eval/``
    values), the request is written beside the checkpoints, and training — its chief, or its only
    process, with a ``CheckpointSink`` on that directory and ``with bus:`` — stops within about a
    second and saves its final checkpoint; parameter-server workers follow through their shared
    stop. The evaluator keeps evaluating until training's run has closed, evaluates the
    checkpoint training ended with, and returns. Checkpoints saved faster than evaluations run
    are skipped: the newest is evaluated next.

    Args:
        bus: The evaluator's bus (use it as ``with bus:`` around this call).
        eval_fetches: What one evaluation batch runs.
        checkpoint_dir: The directory training saves checkpoints to (shared storage).
        eval_hooks: Hooks for each evaluation session (the eval EventBusHook).
        eval_steps: Batches per evaluation (default ``None``: until ``OutOfRangeError``).
        poll_secs: Seconds between looks for a new checkpoint (default 1).
        timeout_secs: Return after this long without a new checkpoint (default ``None``: wait
            until training ends).
        scaffold: Passed to each evaluation session.
        config: With ``scaffold``, above.
        wall_clock: Injected for tests (default :func:`time.time`, :func:`time.sleep`).
        sleep: With ``wall_clock``, above.

    Returns:
        The number of checkpoints evaluated.
    """
    optional_positive_int("eval_steps", eval_steps)
    seconds("poll_secs", poll_secs)
    optional_seconds("timeout_secs", timeout_secs)
    tf = require_tensorflow("evaluate_checkpoints")
    run_files = RunFiles(checkpoint_dir)
    started = wall_clock()
    evaluated, rounds, asked = -1, 0, False
    waiting_since = wall_clock()
    while True:
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        step = step_of(latest) if latest else None
        if latest is not None and step is not None and step > evaluated:
            evaluate_checkpoint(
                latest,
                eval_fetches=eval_fetches,
                eval_hooks=eval_hooks,
                eval_steps=eval_steps,
                scaffold=scaffold,
                config=config,
            )
            evaluated, rounds, waiting_since = step, rounds + 1, wall_clock()
            if bus.should_stop and not asked:
                run_files.request_stop(bus.stop_reason or "the evaluator asked to stop", step, wall_clock())
                asked = True
            continue
        if run_files.ended(started) is not None:
            # Training saves its last checkpoint before it writes the end: look once more.
            last = tf.train.latest_checkpoint(checkpoint_dir)
            if last is not None and (step_of(last) or -1) > evaluated:
                continue
            return rounds
        if timeout_secs is not None and wall_clock() - waiting_since >= timeout_secs:
            logger.warning("no new checkpoint in %s for %g s; the evaluator stops", checkpoint_dir, timeout_secs)
            return rounds
        sleep(poll_secs)
