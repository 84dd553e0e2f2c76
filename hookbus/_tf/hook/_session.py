"""A MonitoredTrainingSession without TensorFlow's own step-counter, summary and checkpoint hooks."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from hookbus._rules._validate import flag, non_negative_seconds
from hookbus._tf._checkpoint_tf1 import restore_failed
from hookbus._tf._import import require_tensorflow

__all__ = ["monitored_training_session"]


def monitored_training_session(
    *,
    checkpoint_dir: str | None = None,
    hooks: Sequence[Any] | None = None,
    chief_only_hooks: Sequence[Any] | None = None,
    master: str = "",
    is_chief: bool = True,
    scaffold: Any = None,
    config: Any = None,
    stop_grace_period_secs: int = 120,
    max_wait_secs: int = 7200,
    **kwargs: Any,
) -> Any:
    """``tf.compat.v1.train.MonitoredTrainingSession`` with TF's own hooks turned off.

    With ``checkpoint_dir`` TensorFlow would silently add a StepCounterHook (a fetch every
    step), a SummarySaverHook and a CheckpointSaverHook (a save at step 0, its own retention).
    They would fight hookbus's sinks, so this wrapper disables all three and keeps only the
    restore from the latest checkpoint in ``checkpoint_dir``. Other arguments pass through.

    A latest checkpoint whose index or data files are damaged is set aside before the restore by
    a :class:`~hookbus.sinks.CheckpointSink` on the directory; one whose damage is inside a
    tensor's bytes fails TensorFlow's restore (its checksums): this then sets it aside, points
    the pointer at the previous checkpoint and says so, and the next start resumes from that one.

    Raises:
        TypeError: if ``kwargs`` tries to turn one of those hooks back on.
        ValueError: if ``stop_grace_period_secs`` or ``max_wait_secs`` is not a finite number of
            seconds >= 0.
        RuntimeError: the latest checkpoint in ``checkpoint_dir`` cannot be restored (TensorFlow's
            ``DataLossError`` as the cause), naming it, why, and what was done or is to do.
    """
    flag("is_chief", is_chief)
    non_negative_seconds("stop_grace_period_secs", stop_grace_period_secs)
    non_negative_seconds("max_wait_secs", max_wait_secs)
    tf = require_tensorflow("monitored_training_session")
    owned = {
        "save_checkpoint_secs",
        "save_checkpoint_steps",
        "save_summaries_steps",
        "save_summaries_secs",
        "log_step_count_steps",
    }
    clash = sorted(owned & set(kwargs))
    if clash:
        raise TypeError(
            f"monitored_training_session() does not take {clash[0]!r}: hookbus sinks do that work "
            "(CheckpointSink, TensorBoardSink); call tf.compat.v1.train.MonitoredTrainingSession "
            "directly if you want TensorFlow's hooks"
        )
    try:
        return tf.compat.v1.train.MonitoredTrainingSession(
            master=master,
            is_chief=is_chief,
            checkpoint_dir=checkpoint_dir,
            scaffold=scaffold,
            hooks=list(hooks or []),
            chief_only_hooks=list(chief_only_hooks or []),
            save_checkpoint_secs=None,
            save_checkpoint_steps=None,
            save_summaries_steps=None,
            save_summaries_secs=None,
            log_step_count_steps=None,
            config=config,
            stop_grace_period_secs=stop_grace_period_secs,
            max_wait_secs=max_wait_secs,
            **kwargs,
        )
    except tf.errors.DataLossError as error:
        latest = tf.train.latest_checkpoint(checkpoint_dir) if checkpoint_dir is not None else None
        if latest is None or os.path.basename(latest) not in error.message:
            raise  # not the restore's: an init op's own read
        raise restore_failed(latest, error) from error
