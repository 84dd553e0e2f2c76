"""The TF2 checkpoint backend (``tf.train.Checkpoint``) and the resume step the TF2 publishers share.

The Keras callback and the loop publisher save through :class:`TF2CheckpointBackend`: the
:class:`~hookbus.sinks.CheckpointSink` owns the schedule and retention exactly as with the TF1
``Saver``, and the files have TensorFlow's layout (:class:`hookbus._tf._checkpoint_tf1.TensorFlowStore`:
``<prefix>.index``, ``<prefix>.data-*``; no ``.meta``); the backend only writes and reads the
variables. A ``tf.train.Checkpoint(model=model, optimizer=optimizer)`` keeps the optimizer's
state and its ``iterations`` (the step), which Keras's ``.weights.h5`` does not.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from hookbus._rules._validate import flag_or_directory
from hookbus._tf import _checkpoint_tf1 as files
from hookbus._tf._checkpoint_write import CompiledWrite

if TYPE_CHECKING:
    from hookbus._bus._bus import EventBus

__all__ = ["Restore", "TF2CheckpointBackend", "check_checkpoint", "check_restore", "restore_latest"]

#: ``restore=`` of the TF2 publishers: ``False``, ``True`` (the CheckpointSink's directory) or a directory.
Restore = bool | str | os.PathLike[str]


def check_checkpoint(checkpoint: object) -> Any:
    """``checkpoint`` if it can write and read (a ``tf.train.Checkpoint``) or is ``None``."""
    if checkpoint is not None and not (
        callable(getattr(checkpoint, "write", None)) and callable(getattr(checkpoint, "read", None))
    ):
        raise TypeError(f"checkpoint must be a tf.train.Checkpoint or None (got {checkpoint!r})")
    return checkpoint


def check_restore(restore: object) -> Restore:
    """Validate ``restore=``: ``False``, ``True`` or a non-empty directory path (not ``"yes"``)."""
    return flag_or_directory("restore", restore)


class TF2CheckpointBackend:
    """A :class:`~hookbus._tf._checkpoint_tf1.CheckpointBackend` over a ``tf.train.Checkpoint``.

    ``save`` is ``checkpoint.write`` (no ``save_counter``, no state file: the sink records and
    prunes), traced once while the checkpoint's objects stay the same
    (:class:`~hookbus._tf._checkpoint_write.CompiledWrite`); ``restore`` is ``checkpoint.read`` and
    asserts that every object of the live checkpoint found its value (variables made later, by a
    model Keras builds at its first batch, take theirs as they are made: :meth:`check_deferred`
    asserts they did). The publisher attaches
    the checkpoint when training begins and detaches it at the end; it is ``ready`` in between.

    Args:
        checkpoint: The ``tf.train.Checkpoint`` to use (default ``None``: attached later).
    """

    def __init__(self, checkpoint: Any = None) -> None:
        self._checkpoint = check_checkpoint(checkpoint)
        self._write: CompiledWrite | None = None  # the checkpoint's write, kept across attaches
        self._deferred: tuple[str, Any] | None = None  # the last restore's prefix and TensorFlow's status of it
        self._live = False

    def attach(self, checkpoint: Any = None) -> None:
        """Start serving ``checkpoint`` (default: the one given at construction)."""
        if checkpoint is not None:
            self._checkpoint = check_checkpoint(checkpoint)
        self._live = self._checkpoint is not None

    def detach(self) -> None:
        """Training ended: nothing is saved after this (nor checked: see :meth:`check_deferred`)."""
        self._live = False
        self._deferred = None

    @property
    def ready(self) -> bool:
        return self._live

    def _check(self) -> Any:
        if not self._live:
            raise RuntimeError("no live model to checkpoint: training has not begun or has ended")
        return self._checkpoint

    def save(self, path: str) -> str:
        checkpoint = self._check()
        if self._write is None or self._write.checkpoint is not checkpoint:
            self._write = CompiledWrite(checkpoint)
        return self._write(path)

    def restore(self, path: str) -> None:
        status = self._check().read(path)
        status.assert_existing_objects_matched()
        # Variables made after the read (a model Keras builds at its first batch) take their values
        # as they are made (TensorFlow's deferred restoration); check_deferred asserts they did.
        self._deferred = (path, status)

    def check_deferred(self) -> None:
        """Assert that the variables made since the last :meth:`restore` took values from its checkpoint.

        Called once the model exists (after its first trained batch) where it did not at the
        restore; a second call checks nothing.

        Raises:
            RuntimeError: naming the checkpoint, where a variable made since found no value in it
                (a model other than the one that was saved).
        """
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return
        path, status = deferred
        try:
            status.assert_existing_objects_matched()
        except AssertionError as error:
            raise RuntimeError(
                f"checkpoint {path} has no value for variables the model made at its first batch: it was saved "
                f"from another model. {error}"
            ) from error


def _directory(bus: EventBus, restore: Restore) -> str:
    if not isinstance(restore, bool):
        return os.path.abspath(os.fspath(restore))
    found = sorted({d for s in bus.sinks if (d := s.checkpoint_directory) is not None})
    if len(found) != 1:
        what = "no CheckpointSink is attached" if not found else f"CheckpointSinks save to {found}"
        raise ValueError(
            f"restore=True resumes from the CheckpointSink's directory, but {what}; pass restore=<directory>"
        )
    return str(found[0])


def restore_latest(bus: EventBus, backend: TF2CheckpointBackend, restore: Restore) -> str | None:
    """Restore the latest checkpoint of the directory ``restore`` names; its prefix, or ``None``.

    ``False`` restores nothing; ``True`` means the attached CheckpointSink's directory. A
    directory without checkpoints (a first run) restores nothing.
    """
    if restore is False:
        return None
    kept = files.list_checkpoints(_directory(bus, restore))
    if not kept:
        return None
    try:
        backend.restore(kept[-1])
    except Exception as error:  # TensorFlow's bare "Read less bytes than requested": say which, and why
        raise files.restore_failed(kept[-1], error) from error
    return kept[-1]
