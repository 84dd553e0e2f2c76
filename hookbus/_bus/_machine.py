"""Reading the machine: the host and this process by ``psutil``, the GPUs this process uses by NVML.

A part of the bus's sampler (:mod:`hookbus._bus._sampler`): :class:`Machine` turns one reading of
the machine into the values of a sample, keyed as :mod:`hookbus._contract._system` names them. It
holds what a reading needs from the previous one (CPU times, network counters at the start) and
nothing of the bus.

Which GPUs are this process's: CUDA numbers the GPUs it shows a process by
``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-<uuid>`` / ``MIG-<uuid>`` prefixes, up to the first
entry that names none; unset: every GPU); TensorFlow may use fewer of those
(``tf.config.set_visible_devices``), which a TensorFlow publisher tells the bus. Each GPU sampled
is found in NVML by its UUID, or by its index where ``CUDA_VISIBLE_DEVICES`` gives an index
(CUDA's index follows NVML's, the PCI bus order, under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; CUDA's
default order puts the fastest first, which differs only on a host with unlike GPUs). The other
GPUs of a shared host are never sampled (MLflow samples them all).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from hookbus._contract import _system as names

__all__ = ["Machine", "cuda_visible"]

_MB = 1e6

#: ``() -> {tf_index: (current_bytes, peak_bytes)}``: TensorFlow's allocator per GPU.
Allocator = Callable[[], Mapping[int, tuple[int, int]]]


def cuda_visible(environ: Mapping[str, str], uuids: Sequence[str]) -> list[int] | None:
    """The NVML indices of the GPUs CUDA shows this process, in CUDA's order, or ``None`` where
    ``CUDA_VISIBLE_DEVICES`` is unset (every GPU, in NVML's order).

    Args:
        environ: The process's environment.
        uuids: Each NVML device's UUID (``GPU-...``), by NVML index.
    """
    given = environ.get("CUDA_VISIBLE_DEVICES")
    if given is None:
        return None
    chosen: list[int] = []
    for entry in (e.strip() for e in given.split(",")):
        if entry.isdigit():
            index = int(entry)
            found = index if index < len(uuids) else None
        else:
            matches = [i for i, uuid in enumerate(uuids) if entry and uuid.startswith(entry)]
            found = matches[0] if len(matches) == 1 else None
        if found is None or found in chosen:  # CUDA reads no further than an entry that names no GPU
            break
        chosen.append(found)
    return chosen


class Machine:
    """One reader of the machine for a run: :meth:`open`, :meth:`read` per sample, :meth:`close`.

    Args:
        psutil_module: ``psutil`` (a stand-in in tests).
        nvml: The NVML module (``pynvml``, from ``nvidia-ml-py``), or ``None`` to import it at
            :meth:`open`; a stand-in in tests.
        environ: The environment ``CUDA_VISIBLE_DEVICES`` is read from.
        tf_gpus: The indices, among the GPUs CUDA shows, that TensorFlow uses (its ``/GPU:i`` in
            order), or ``None``: all of them.
        allocator: TensorFlow's allocator per ``/GPU:i`` (current and peak bytes), or ``None``.
        disk_path: The file system whose usage is read (default the root, as MLflow reads).
    """

    def __init__(
        self,
        *,
        psutil_module: ModuleType | None = None,
        nvml: Any = None,
        environ: Mapping[str, str] = os.environ,
        tf_gpus: Sequence[int] | None = None,
        allocator: Allocator | None = None,
        disk_path: str = os.sep,
    ) -> None:
        self._psutil: Any = importlib.import_module("psutil") if psutil_module is None else psutil_module
        self._nvml = nvml
        self._environ = environ
        self._tf_gpus = tf_gpus
        self.allocator = allocator
        self._disk_path = disk_path
        self._process: Any = None
        self._net_start: tuple[float, float] | None = None
        #: ``(tf_index, nvml_handle)`` for each GPU sampled.
        self.gpus: list[tuple[int, Any]] = []
        self._nvml_open = False
        #: Whether the notice :meth:`open` returned is worth a warning (a GPU library or GPU that should
        #: be there is not), rather than the plain fact of a host without NVIDIA GPUs.
        self.worrying = False

    # -- opening -----------------------------------------------------------------------------
    def open(self) -> str | None:
        """Start reading: prime the CPU counters, note the network counters, find the GPUs.

        Returns:
            ``None`` where at least one GPU is sampled; otherwise the sentence that says why none
            is (NVML absent, no GPU), for the first sample's notice.
        """
        psutil = self._psutil
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # the first call only starts the count
        psutil.cpu_percent(None)
        net = psutil.net_io_counters()
        self._net_start = None if net is None else (net.bytes_recv / _MB, net.bytes_sent / _MB)
        return self._open_nvml()

    def _open_nvml(self) -> str | None:
        nvml = self._nvml
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError:
                self.worrying = True
                return (
                    "NVML absent: the nvidia-ml-py package is not installed (pip install nvidia-ml-py); "
                    "no GPU is sampled"
                )
            self._nvml = nvml
        try:
            nvml.nvmlInit()
        except Exception as error:  # NVMLError: no driver library (a host without NVIDIA GPUs), no driver loaded
            # A host without NVIDIA's driver is the usual CPU machine: said in the sample, not warned
            # about, unless the process was given GPUs to use.
            self.worrying = self._environ.get("CUDA_VISIBLE_DEVICES", "").strip() not in ("", "-1")
            return f"NVML absent: {error} (no NVIDIA driver here); no GPU is sampled"
        self._nvml_open = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
        except Exception as error:  # a driver that answers init but not the devices
            self.worrying = True
            return f"NVML absent: listing the GPUs failed ({error}); no GPU is sampled"
        if not handles:
            return "no GPU: NVML sees no GPU on this host"
        visible = cuda_visible(self._environ, uuids)
        shown = list(range(count)) if visible is None else visible
        if not shown:
            value = self._environ.get("CUDA_VISIBLE_DEVICES")
            return f"no GPU: CUDA_VISIBLE_DEVICES={value!r} shows this process none of the host's {count} GPUs"
        used = shown if self._tf_gpus is None else [shown[i] for i in self._tf_gpus if i < len(shown)]
        if not used:
            return f"no GPU: TensorFlow uses none of the {len(shown)} GPUs CUDA shows this process"
        self.gpus = [(tf_index, handles[nvml_index]) for tf_index, nvml_index in enumerate(used)]
        return None

    # -- a reading ---------------------------------------------------------------------------
    def read(self) -> dict[str, float]:
        """One sample's values (see :mod:`hookbus._contract._system` for the keys)."""
        psutil = self._psutil
        values: dict[str, float] = {}
        values[names.CPU] = float(psutil.cpu_percent(None))
        memory = psutil.virtual_memory()
        values[names.MEMORY] = memory.used / _MB
        values[names.MEMORY_PERCENT] = float(memory.percent)
        try:
            disk = psutil.disk_usage(self._disk_path)
        except OSError:  # the file system went away: its values are missing from this sample
            pass
        else:
            values[names.DISK] = disk.used / _MB
            values[names.DISK_AVAILABLE] = disk.free / _MB
            values[names.DISK_PERCENT] = float(disk.percent)
        net = psutil.net_io_counters()
        if net is not None and self._net_start is not None:
            values[names.NETWORK_RECEIVE] = net.bytes_recv / _MB - self._net_start[0]
            values[names.NETWORK_TRANSMIT] = net.bytes_sent / _MB - self._net_start[1]
        process = self._process
        if process is not None:
            with process.oneshot():
                values[names.PROCESS_CPU] = float(process.cpu_percent(None))
                values[names.PROCESS_MEMORY] = process.memory_info().rss / _MB
        self._read_gpus(values)
        return values

    def _read_gpus(self, values: dict[str, float]) -> None:
        nvml = self._nvml
        for index, handle in self.gpus:
            # Each measure on its own: a GPU without power readings still gives its utilization.
            # NVMLError_NotSupported and kin: that measure is not taken on this GPU.
            with contextlib.suppress(Exception):
                utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                values[names.system_gpu_key(index, "utilization_percentage")] = float(utilization)
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                values[names.system_gpu_key(index, "memory_usage_megabytes")] = memory.used / _MB
                values[names.system_gpu_key(index, "memory_usage_percentage")] = 100.0 * memory.used / memory.total
            except Exception:
                pass
            try:
                watts = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
                values[names.system_gpu_key(index, "power_usage_watts")] = watts
                limit = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
                if limit > 0:
                    values[names.system_gpu_key(index, "power_usage_percentage")] = 100.0 * watts / limit
            except Exception:
                pass
        if self.allocator is not None:
            try:
                allocated = self.allocator()
            except Exception:  # the framework is shutting down: no allocator reading this time
                allocated = {}
            for index, (current, peak) in allocated.items():
                values[names.system_gpu_key(index, "tensorflow_memory_current_megabytes")] = current / _MB
                values[names.system_gpu_key(index, "tensorflow_memory_peak_megabytes")] = peak / _MB

    def close(self) -> None:
        """Stop reading (NVML shut down); idempotent."""
        if self._nvml_open:
            self._nvml_open = False
            with contextlib.suppress(Exception):  # nothing to release any more
                self._nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    """A string NVML returned (older bindings return bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)
