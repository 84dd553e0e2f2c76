"""A ``tf.train.Checkpoint``'s write as one traced TensorFlow function, while its objects stay the same.

An eager ``Checkpoint.write`` walks the checkpoint's object graph in Python, gathers every
variable's tensors and builds the object-graph proto again at every save: for Keras's
``steps_per_execution=32`` benchmark model (3 dense layers, Adam) about three quarters of its
7–9 ms of CPU time, the rest being the two file ops (``SaveV2``, ``MergeV2Checkpoints``). A
``tf.function`` of the same ``write`` does that walk once, when traced, and each call then runs
the graph of the two file ops, reading the variables' current values: about 2 ms.

The walk's result holds while the checkpoint's objects are the same, so :class:`CompiledWrite`
lists them at every save (``tf.train.TrackableView(...).descendants()``, a fraction of a
millisecond) and traces again when the list changes (an optimizer built, a layer added, a
variable replaced). It traces only a checkpoint whose every value is a plain variable's (a
``tf.Variable`` or a Keras variable, not distributed): a trackable that saves Python state or a
distributed variable would be frozen or placed at trace time, so such a checkpoint is written
eagerly, as before; so is one whose variables span tasks. The files are an eager ``write``'s,
byte for byte: the object graph's tensor is placed on the variables' task, so that the write
keeps one data file.
"""

from __future__ import annotations

from typing import Any

from hookbus._tf._import import require_tensorflow

__all__ = ["CompiledWrite"]


def _save_device(objects: list[Any]) -> str | None:
    """Where a traced write of a checkpoint with these ``objects`` places its object graph: the CPU
    of their variables' one task (an eager write's one data file). ``None``: it reads more than plain
    variables' values (Python state, a lookup table, a distributed variable) or spans tasks."""
    tf = require_tensorflow("a checkpoint write")
    base = tf.__internal__.tracking.Trackable  # the base, whose serializers save nothing
    keras_variable: Any = getattr(getattr(tf, "keras", None), "Variable", None)
    tasks = set()
    for obj in objects:
        inner = obj.value if keras_variable is not None and isinstance(obj, keras_variable) else obj
        if isinstance(inner, tf.Variable):
            if isinstance(inner, tf.distribute.DistributedValues):
                return None
            tasks.add(tf.DeviceSpec.from_string(inner.device).replace(device_type="CPU", device_index=0))
            continue
        kind = type(obj)
        if (
            kind._serialize_to_tensors is not base._serialize_to_tensors
            or kind._gather_saveables_for_checkpoint is not base._gather_saveables_for_checkpoint
        ):
            return None  # saves tensors of its own (Python state, a lookup table, an iterator)
    if len(tasks) > 1:
        return None
    return tasks.pop().to_string() if tasks else "/cpu:0"


class CompiledWrite:
    """Writes a ``tf.train.Checkpoint`` through a traced function while its objects stay the same.

    Args:
        checkpoint: The ``tf.train.Checkpoint`` to write.
    """

    def __init__(self, checkpoint: Any) -> None:
        self.checkpoint = checkpoint
        self._objects: list[Any] = []  # the checkpoint's objects when ``_write`` was traced (held)
        self._write: Any = None  # the traced write (its concrete function), or None: written eagerly
        self._traced: Any = None
        #: Traces made (a new one each time the checkpoint's objects change).
        self.traces = 0

    def __call__(self, path: str) -> str:
        """Write the checkpoint to ``path`` (a prefix); the prefix written."""
        tf = require_tensorflow("a checkpoint write")
        objects = tf.train.TrackableView(self.checkpoint).descendants()
        if len(objects) != len(self._objects) or any(a is not b for a, b in zip(objects, self._objects, strict=True)):
            self._objects = objects
            device = None if tf.distribute.has_strategy() else _save_device(objects)
            self._write = None if device is None else self._trace(tf, device)
        if self._write is None:
            return str(self.checkpoint.write(path))
        written = self._write(tf.constant(path))
        return bytes(written.numpy()).decode()  # waits for the write to finish

    def _trace(self, tf: Any, device: str) -> Any:
        checkpoint = self.checkpoint

        def write(prefix: Any) -> Any:
            with tf.device(device):  # the object graph's tensor on the variables' task: one data file, as eager
                return checkpoint.write(prefix)

        traced = tf.function(write, input_signature=[tf.TensorSpec([], tf.string)])
        self._traced = traced  # the concrete function's owner, kept with it
        self.traces += 1
        # Traced now, on the objects just listed; called as the concrete function, which skips the
        # tf.function's signature matching (about a third of a traced call's Python time).
        return traced.get_concrete_function()
