"""What a checkpoint directory holds as a run starts: an unreadable latest, what a kill left.

Before any session restores, :class:`~hookbus.sinks.CheckpointSink`'s one writing process
repairs its directory: a latest checkpoint whose files are not whole is set aside and the
pointer names the previous one (:func:`fall_back_from_unreadable`), and checkpoints a kill left
between the pointer and pruning are pruned (:func:`prune_leftovers`). Both go through the
publisher's store and the bus's checkpoint seam; neither knows the sink.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from hookbus.sink_api import recover, step_of

if TYPE_CHECKING:
    from hookbus.sink_api import Checkpoints

__all__ = ["fall_back_from_unreadable", "prune_leftovers"]

logger = logging.getLogger("hookbus")


def fall_back_from_unreadable(name: str, directory: str, checkpoints: Checkpoints) -> None:
    """Resume from the latest checkpoint whose files are whole (``BackupAndRestore(double_checkpoint=True)``).

    Before any session restores (the TF1 session and the TF2 publishers alike read the
    pointer after ``begin``): a latest checkpoint whose files are damaged (a data file cut
    short by a full disk or a copy, or missing, an index whose checksum fails) is named in a
    warning with what is wrong, moved to ``directory/unreadable``, and the pointer names the
    previous one that ``keep`` holds, whose sinks' states are then loaded. The store's check
    (``CheckpointStore.problem``) need not read the model: TensorFlow's reads the index alone,
    and a damaged byte inside a tensor is found by the restore itself
    (:func:`hookbus._tf._checkpoint_tf1.restore_failed` then sets it aside for the next start).

    Args:
        name: The sink's name, in the warning and the error.
        directory: The checkpoint directory.
        checkpoints: The bus's checkpoint seam (its store lists, checks and moves the files).

    Raises:
        RuntimeError: No checkpoint in ``directory`` reads back, naming each and what is wrong.
    """
    store = checkpoints.store
    kept = store.checkpoints(directory)
    unreadable: list[tuple[str, str]] = []
    while kept and (problem := store.problem(kept[-1])) is not None:
        unreadable.append((kept.pop(), problem))
    if not unreadable:
        return
    if not kept:
        listed = "; ".join(f"{path}: {problem}" for path, problem in unreadable)
        raise RuntimeError(
            f"{name}: no checkpoint in {directory!r} can be restored ({listed}); move them "
            "away to train from scratch, or restore a copy"
        )
    for path, problem in unreadable:
        moved = store.set_aside(path)
        logger.warning(
            "%s: checkpoint %s cannot be restored: %s. It is moved to %s; training resumes from the "
            "previous checkpoint %s (step %s), with the sinks' states saved beside that one",
            name,
            path,
            problem,
            moved,
            kept[-1],
            step_of(kept[-1]),
        )
    checkpoints.keep_only(directory, kept, [])


def prune_leftovers(name: str, directories: Iterable[tuple[str, int | None]], checkpoints: Checkpoints) -> None:
    """Prune what a kill between the pointer and pruning left: checkpoints beyond ``keep`` and
    those the pointer does not name (never the latest; see :func:`hookbus.sink_api.recover`).

    Args:
        name: The sink's name, in the log line.
        directories: ``(directory, keep)`` pairs; ``keep=None`` keeps every checkpoint the pointer names.
        checkpoints: The bus's checkpoint seam (its store lists; ``keep_only`` prunes).
    """
    for directory, keep in directories:
        kept, dropped = recover(checkpoints.store, directory, keep)
        if dropped:
            logger.info("%s: pruning %d checkpoint(s) left in %s", name, len(dropped), directory)
            checkpoints.keep_only(directory, kept, dropped)
