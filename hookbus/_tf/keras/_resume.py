"""Resuming a Keras ``fit``: the epoch it starts at, and passing over the batches trained before.

A restored step starts ``fit`` at its epoch (:func:`start_epoch`, as Keras's ``BackupAndRestore``).
A stop in the middle of an epoch (Ctrl-C, SIGTERM, a stop-at-step) saves a checkpoint at that
step. Keras's own ``BackupAndRestore(save_freq=N)`` resumes such a checkpoint at the start of
its epoch (Keras 3.15 restores the epoch, not the batch), so the batches of that epoch trained
before the stop are trained again. Here ``fit`` still starts at the epoch's first batch (Keras
offers a callback no way to start later), but ``model.train_function`` is wrapped for that
epoch's first calls: each reads its batches from the iterator and returns without training, and
then puts Keras's function back. The epoch keeps its length and Keras its batch numbering;
the callback publishes nothing for the batches passed over. The epoch the stop cut short
publishes no validation and no epoch record (:func:`cut_short`): the resume completes it.

A model Keras builds at its first batch (a ``Sequential`` without ``Input``, the model of
Keras's own callback tests) has no variables when ``fit`` calls ``on_train_begin``
(:func:`prepare_restore`). With no checkpoint to restore, ``fit`` just starts, as with Keras's
``ModelCheckpoint``. With one, the checkpoint is read at ``on_train_begin`` all the same: the
optimizer's ``iterations`` and rate exist from its construction and take their values at once,
so the step and the epoch to resume at are known before the first batch; the model's variables
and the optimizer's slots, which Keras makes while tracing the first train step, take theirs
from TensorFlow's deferred restoration as each is made, inside that step and before its
gradients are applied. The first step trains from the restored weights, exactly as it would
had the model been built beforehand, and the run continues as an uninterrupted one. Once that
step has trained, and before anything is published or saved from it, every variable made is
checked to have found its value (a checkpoint of another model fails there, naming it).
Keras's ``BackupAndRestore`` refuses an unbuilt model instead; a restore *after* the first
batch would be wrong: that batch would train from fresh weights and be thrown away, so the
resumed epoch would lose a batch of its input, and its loss would stay in the epoch's running
means and in the logs other callbacks saw.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["cut_short", "pass_over", "prepare_restore", "restore_train_function", "start_epoch"]

logger = logging.getLogger("hookbus")

_WRAPPED = "_hookbus_trains"  # the attribute of a wrapper that holds Keras's own train function


def prepare_restore(model: Any, optimizer: Any) -> bool:
    """Make the variables a restore at ``on_train_begin`` gives values to; whether some are made later.

    A built model: the optimizer's variables are built over the model's trainable variables
    where they do not exist yet (as Keras's ``BackupAndRestore`` does), so that they take their
    values now, also if no batch runs. A model Keras builds at its first batch: nothing is built
    (an optimizer built over its still empty list of variables would refuse them at the first
    batch); its variables and the optimizer's slots take their values as they are made (see the
    module).

    Returns:
        ``True`` where the model is not built yet: the restore is completed at its first batch,
        and checked after it (:meth:`~hookbus._tf._checkpoint_tf2.TF2CheckpointBackend.check_deferred`).
    """
    if not getattr(model, "built", True):
        return True
    if not getattr(optimizer, "built", True):
        optimizer.build(model.trainable_variables)
    return False


def start_epoch(model: Any, params: Mapping[str, Any] | None, step: int, restored: bool) -> tuple[int, int]:
    """Where ``fit`` starts: at the epoch of the restored ``step``, or past its last epoch (no
    epoch at all) when a stop was asked for before the first batch (Keras looks at
    ``stop_training`` only after a batch). The epoch goes to ``model._initial_epoch``, what
    Keras's trainer reads for this, set by its own ``BackupAndRestore`` in ``on_train_begin``. A
    step restored in the middle of an epoch (a stop mid-epoch saved it) resumes that epoch after
    its last trained batch: the batches before are passed over (:func:`pass_over`: read, not
    trained), so no step is trained twice.

    Returns:
        ``(epoch, batches)``: the epoch to start at (0: as ``fit`` was told) and the batches of it
        to pass over.
    """
    params = params or {}  # None from a CallbackList without params
    epochs, steps = params.get("epochs"), params.get("steps")
    if not hasattr(model, "_initial_epoch") or not isinstance(epochs, int):
        return 0, 0
    if model.stop_training:
        return epochs, 0
    if restored and isinstance(steps, int) and steps > 0:
        start, batches = divmod(step, steps)
        return start, batches
    return 0, 0


def pass_over(model: Any, batches: int, passed: Callable[[], None]) -> None:
    """Have ``model``'s next ``fit`` calls read ``batches`` batches without training on them.

    Each call Keras makes reads up to ``steps_per_execution`` batches; ``passed`` is called once
    per call passed over (before Keras reports its batch end). Keras's train function is put
    back once they are read.
    """
    restore_train_function(model)
    model.make_train_function()
    train = model.train_function
    per_call = max(1, int(getattr(model, "steps_per_execution", 1) or 1))
    left = batches

    def read_without_training(iterator: Any) -> Any:
        nonlocal left
        if left <= 0:  # read them all: from here on Keras trains
            model.train_function = train
            return train(iterator)
        read = 0
        for _ in range(min(per_call, left)):
            if not iterator.get_next_as_optional().has_value():
                break
            read += 1
        left -= per_call
        if left <= 0:
            model.train_function = train
        if read == 0:
            raise StopIteration  # the input ran out, as Keras's own function says it
        passed()
        return {}

    setattr(read_without_training, _WRAPPED, train)
    model.train_function = read_without_training
    logger.info("resuming in the middle of an epoch: passing over its first %d batch(es), trained before", batches)


def restore_train_function(model: Any) -> None:
    """Put Keras's own train function back if a :func:`pass_over` wrapper is still installed
    (a ``fit`` that ended before reading all the batches passed over)."""
    train = getattr(getattr(model, "train_function", None), _WRAPPED, None)
    if train is not None:
        model.train_function = train


def cut_short(params: Any, model: Any, batches: int) -> bool:
    """Whether a stop ended the epoch after ``batches`` of its batches, before its last one.

    Its validation and epoch record are not published then: the epoch is not over, and a
    resume completes it and publishes them once. With an input of unknown length (``params``
    has no ``steps``) every epoch counts as complete.
    """
    steps = (params or {}).get("steps")
    stopped = bool(getattr(model, "stop_training", False))
    return stopped and isinstance(steps, int) and 0 < batches < steps
