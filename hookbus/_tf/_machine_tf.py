"""What TensorFlow tells the bus's sampler of the machine: which GPUs it uses, and its allocator.

The TensorFlow publishers offer it (``PublisherCore.offer_machine``) as a training begins, so the
sampler samples only the GPUs TensorFlow trains on (``tf.config.set_visible_devices`` may hide
some that CUDA shows) and reads TensorFlow's own allocator, which no other tool reads.
"""

from __future__ import annotations

from typing import Any

from hookbus._contract._system import MachineOffer
from hookbus._tf._import import require_tensorflow

__all__ = ["tensorflow_machine"]


def tensorflow_machine() -> MachineOffer:
    """The GPUs TensorFlow uses (by their index among the GPUs CUDA shows the process) and a reading
    of its allocator per ``/GPU:i``."""
    tf = require_tensorflow("sampling TensorFlow's GPUs")
    physical = tf.config.list_physical_devices("GPU")
    if not physical:  # CUDA shows no GPU (or this TensorFlow has no CUDA): the sampler says so from NVML
        return MachineOffer(gpus=None, allocator=None)
    index = {device.name: i for i, device in enumerate(physical)}
    visible = [index[d.name] for d in tf.config.get_visible_devices("GPU") if d.name in index]
    return MachineOffer(gpus=visible, allocator=lambda: _allocator(tf, len(visible)))


def _allocator(tf: Any, count: int) -> dict[int, tuple[int, int]]:
    """``{i: (current, peak)}`` bytes of TensorFlow's allocator on each ``/GPU:i`` that reports it."""
    found: dict[int, tuple[int, int]] = {}
    for i in range(count):
        try:
            info = tf.config.experimental.get_memory_info(f"GPU:{i}")
        except (ValueError, RuntimeError):  # a device whose allocator keeps no statistics
            continue
        found[i] = (int(info["current"]), int(info["peak"]))
    return found
