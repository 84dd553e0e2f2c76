"""The machine's samples as sinks see them: the ``system`` signal's mode, key names and notices.

A bus samples the machine on a thread of its own (``EventBus(system_metrics=...)``) and publishes
each sample as an :class:`~hookbus.sink_api.Event` on the ``system`` signal: ``signal="system"``,
``mode="system"``, ``step`` the latest training step the bus knows (it stays flat while training
is stalled), ``wall_time``, ``elapsed`` and the task, and ``values`` keyed by the names below.
Every value is a float. Where MLflow has a system metric, the key is MLflow's own name (what its
"System metrics" tab reads); what MLflow lacks is named in the same style. Megabytes are 10⁶
bytes, as MLflow's are.

Host (``psutil``), on every sample:

- ``system/cpu_utilization_percentage``: the host's CPU, all cores, since the previous sample.
- ``system/system_memory_usage_megabytes``, ``system/system_memory_usage_percentage``: the
  host's memory in use.
- ``system/disk_usage_megabytes``, ``system/disk_available_megabytes``,
  ``system/disk_usage_percentage``: the root file system.
- ``system/network_receive_megabytes``, ``system/network_transmit_megabytes``: received and sent
  since the sampler started.
- ``system/process_cpu_utilization_percentage``: this process, since the previous sample, in
  percent of one core (a process busy on 4 cores shows 400).
- ``system/process_memory_rss_megabytes``: this process's resident memory.

GPUs (NVML, ``nvidia-ml-py``), for each GPU *this process uses*, numbered as TensorFlow numbers
them (``gpu_0`` is ``/GPU:0``):

- ``system/gpu_<i>_utilization_percentage``, ``system/gpu_<i>_memory_usage_megabytes``,
  ``system/gpu_<i>_memory_usage_percentage``, ``system/gpu_<i>_power_usage_watts``,
  ``system/gpu_<i>_power_usage_percentage`` (MLflow's names).
- ``system/gpu_<i>_tensorflow_memory_current_megabytes``,
  ``system/gpu_<i>_tensorflow_memory_peak_megabytes``: TensorFlow's own allocator on that device
  (``tf.config.experimental.get_memory_info``), where a TensorFlow publisher offers it.

Where no GPU is sampled the reason is said once, visibly: the first sample's
:data:`SYSTEM_NOTICE_KEY` value is a sentence (``"NVML absent: ..."``, ``"no GPU: ..."``) — the one value
that is not a float — and the bus logs it once (a warning where a GPU library or a GPU the process was
given is missing; INFO on a host without NVIDIA GPUs). Sinks that show the machine keep it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "GPU_KEY",
    "GPU_MEASURES",
    "MachineOffer",
    "SYSTEM_NOTICE_KEY",
    "SYSTEM_MODE",
    "SYSTEM_PREFIX",
    "SYSTEM_SIGNAL",
    "system_gpu_key",
    "system_gpu_of",
]

#: The signal a sample is published on, and its events' ``mode``.
SYSTEM_SIGNAL = "system"
SYSTEM_MODE = "system"
#: Every sample key starts with it (MLflow's own prefix for system metrics).
SYSTEM_PREFIX = "system/"
#: The key of the sentence that says why no GPU is sampled (first sample only).
SYSTEM_NOTICE_KEY = "system/notice"

CPU = "system/cpu_utilization_percentage"
MEMORY = "system/system_memory_usage_megabytes"
MEMORY_PERCENT = "system/system_memory_usage_percentage"
DISK = "system/disk_usage_megabytes"
DISK_AVAILABLE = "system/disk_available_megabytes"
DISK_PERCENT = "system/disk_usage_percentage"
NETWORK_RECEIVE = "system/network_receive_megabytes"
NETWORK_TRANSMIT = "system/network_transmit_megabytes"
PROCESS_CPU = "system/process_cpu_utilization_percentage"
PROCESS_MEMORY = "system/process_memory_rss_megabytes"

#: What a GPU key may name after ``gpu_<i>_``.
GPU_MEASURES = (
    "utilization_percentage",
    "memory_usage_megabytes",
    "memory_usage_percentage",
    "power_usage_watts",
    "power_usage_percentage",
    "tensorflow_memory_current_megabytes",
    "tensorflow_memory_peak_megabytes",
)
#: Matches a GPU key: its index and its measure.
GPU_KEY = re.compile(r"system/gpu_(\d+)_(" + "|".join(GPU_MEASURES) + r")")


def system_gpu_key(index: int, measure: str) -> str:
    """The key of ``measure`` (one of :data:`GPU_MEASURES`) for TensorFlow's ``/GPU:<index>``."""
    if measure not in GPU_MEASURES:
        raise ValueError(f"measure must be one of {', '.join(GPU_MEASURES)} (got {measure!r})")
    return f"system/gpu_{index}_{measure}"


def system_gpu_of(key: str) -> tuple[int, str] | None:
    """``(index, measure)`` of a GPU key, ``None`` for any other key."""
    matched = GPU_KEY.fullmatch(key)
    return None if matched is None else (int(matched.group(1)), matched.group(2))


@dataclass(frozen=True)
class MachineOffer:
    """What a training publisher's framework tells the sampler (``PublisherCore.offer_machine``).

    Attributes:
        gpus: The indices, among the GPUs CUDA shows this process, that the framework trains on,
            in the framework's own order (its ``/GPU:0`` first); ``None``: all of them.
        allocator: Reads the framework's allocator: ``{gpu: (current_bytes, peak_bytes)}`` by the
            framework's GPU index; ``None`` where it offers none. Called on the sampler's thread.
    """

    gpus: Sequence[int] | None
    allocator: Callable[[], Mapping[int, tuple[int, int]]] | None
