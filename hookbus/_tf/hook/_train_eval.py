"""The seed's train-then-evaluate flow on MonitoredSession, until a sink stops the run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from hookbus._bus._bus import mark_evaluated
from hookbus._rules._validate import flag, optional_positive_int, positive_int
from hookbus._tf import _checkpoint_tf1 as files
from hookbus._tf._import import require_tensorflow
from hookbus._tf.hook._evaluator import evaluate_checkpoint
from hookbus._tf.hook._session import monitored_training_session

if TYPE_CHECKING:
    from hookbus._bus._bus import EventBus

__all__ = ["train_and_evaluate"]


def train_and_evaluate(
    bus: EventBus,
    *,
    train_op: Any,
    eval_fetches: Any,
    checkpoint_dir: str,
    steps_per_round: int,
    train_hooks: Sequence[Any],
    eval_hooks: Sequence[Any],
    eval_steps: int | None = None,
    max_rounds: int | None = None,
    run_step: Callable[[Any], Any] | None = None,
    evaluate_after_stop: bool = True,
    scaffold: Any = None,
    config: Any = None,
) -> int:
    """Alternate training and evaluation, as ``estimator.train`` / ``evaluate`` did, until stopped.

    Each round trains ``steps_per_round`` steps in a :func:`monitored_training_session` on
    ``checkpoint_dir`` (restoring the latest checkpoint), then evaluates the checkpoint that
    round ended with in a fresh ``MonitoredSession`` restored from ``checkpoint_dir``, running
    ``eval_fetches`` ``eval_steps`` times (default ``None``: until the input is exhausted,
    ``OutOfRangeError``). An eval :class:`EventBusHook` in ``eval_hooks`` publishes
    ``eval/<key>`` at the end of each evaluation, so ``EarlyStoppingSink(monitor="eval/loss")``
    stops the run at the evaluation its rule implies. The loop ends when a subscriber requests a
    stop (``bus.should_stop``; a stop during training still gets its final evaluation, see
    ``evaluate_after_stop``) or after ``max_rounds`` rounds (default ``None``: no limit).

    A checkpoint must exist after every training round: attach a ``CheckpointSink`` on
    ``checkpoint_dir`` (it saves at the end of each session).

    Args:
        bus: The bus the hooks publish on (use it as ``with bus:`` around this call).
        train_op: What one training step runs.
        eval_fetches: What one evaluation batch runs.
        checkpoint_dir: Where checkpoints are saved and restored.
        steps_per_round: Training steps between evaluations.
        train_hooks: Hooks for the training sessions (the train EventBusHook).
        eval_hooks: Hooks for the evaluation sessions (the eval EventBusHook).
        eval_steps: Batches per evaluation (default ``None``: until ``OutOfRangeError``).
        max_rounds: At most this many rounds (default ``None``).
        run_step: ``run_step(session)`` runs one training step (default: ``session.run(train_op)``).
        evaluate_after_stop: When a stop is requested during training (stop-at-step, a NaN
            guard, SIGTERM), still evaluate the checkpoint training ended with (default ``True``;
            pass ``False`` where a preempted machine has no time for it).
        scaffold: Passed to both kinds of session.
        config: With ``scaffold``, above.

    Returns:
        The number of evaluations run.
    """
    positive_int("steps_per_round", steps_per_round)
    optional_positive_int("eval_steps", eval_steps)
    optional_positive_int("max_rounds", max_rounds)
    flag("evaluate_after_stop", evaluate_after_stop)
    tf = require_tensorflow("train_and_evaluate")
    step = run_step if run_step is not None else (lambda session: session.run(train_op))
    # A process killed while it evaluated checkpoint S left S without its "evaluated" record: the
    # first round then trains nothing (the session restores S and the sinks' states from before
    # that evaluation) and evaluates S, so eval rows and early stopping's patience come out as in
    # an uninterrupted run.
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    make_up = latest is not None and _evaluated(latest) is False
    rounds = 0
    while not bus.should_stop and (max_rounds is None or rounds < max_rounds):
        with monitored_training_session(
            checkpoint_dir=checkpoint_dir, hooks=train_hooks, scaffold=scaffold, config=config
        ) as session:
            for _ in range(0 if make_up else steps_per_round):
                if session.should_stop():
                    break
                step(session)
        make_up = False
        stopped = bus.should_stop
        if stopped and not evaluate_after_stop:
            break
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        if latest is None:
            raise RuntimeError(
                f"no checkpoint in {checkpoint_dir!r} after training: attach a "
                "hookbus.sinks.CheckpointSink on that directory so each round can be evaluated"
            )
        if not _evaluated(latest):  # a session that trained nothing ends on an evaluated checkpoint
            evaluate_checkpoint(
                latest,
                eval_fetches=eval_fetches,
                eval_hooks=eval_hooks,
                eval_steps=eval_steps,
                scaffold=scaffold,
                config=config,
            )
            mark_evaluated(bus, latest, files.TENSORFLOW)  # durable: a kill before this is made up on restart
            rounds += 1
        elif not stopped:
            break  # the round made no new checkpoint (an input that ended): nothing left to evaluate
        if stopped:
            break
    return rounds


def _evaluated(prefix: str) -> bool | None:
    """Whether checkpoint ``prefix`` was evaluated (its state file says so); ``None`` without one."""
    data = files.read_state_file(prefix)
    return None if data is None else bool(data.get("evaluated"))
