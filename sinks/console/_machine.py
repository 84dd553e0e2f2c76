"""The dashboard's machine line: the last sample of the machine in one line of text."""

from __future__ import annotations

from collections.abc import Mapping

from hookbus.sink_api import system_gpu_of

__all__ = ["gpu_figures", "host_figures", "machine_line", "process_figures"]

_CPU = "system/cpu_utilization_percentage"
_MEMORY = "system/system_memory_usage_megabytes"
_MEMORY_PERCENT = "system/system_memory_usage_percentage"
_PROCESS_CPU = "system/process_cpu_utilization_percentage"
_PROCESS_MEMORY = "system/process_memory_rss_megabytes"
_DISK = "system/disk_usage_megabytes"
_DISK_PERCENT = "system/disk_usage_percentage"
_RECEIVED = "system/network_receive_megabytes"
_SENT = "system/network_transmit_megabytes"


def _gb(megabytes: float) -> str:
    return f"{megabytes / 1000:.1f} GB"


def machine_line(values: Mapping[str, object], notice: str | None) -> str:
    """``machine: CPU 34% (this process 97%) · memory 5.2 GB (33%), this process 1.1 GB · GPU0 88%
    9.8 GB 243 W (TF peak 9.1 GB)``; where no GPU is sampled, why, in short (``NVML absent``,
    ``no GPU: CUDA_VISIBLE_DEVICES='' shows ...``).

    Args:
        values: A sample's values (``system/...`` keys; what is missing is left out).
        notice: The sentence that said why no GPU is sampled (kept from the run's first sample),
            or ``None``.
    """
    number = {k: v for k, v in values.items() if isinstance(v, float)}
    parts: list[str] = []
    if _CPU in number:
        process = f" (this process {number[_PROCESS_CPU]:.0f}%)" if _PROCESS_CPU in number else ""
        parts.append(f"CPU {number[_CPU]:.0f}%{process}")
    if _MEMORY in number:
        percent = f" ({number[_MEMORY_PERCENT]:.0f}%)" if _MEMORY_PERCENT in number else ""
        process = f", this process {_gb(number[_PROCESS_MEMORY])}" if _PROCESS_MEMORY in number else ""
        parts.append(f"memory {_gb(number[_MEMORY])}{percent}{process}")
    gpus: dict[int, dict[str, float]] = {}
    for key, value in number.items():
        found = system_gpu_of(key)
        if found is not None:
            gpus.setdefault(found[0], {})[found[1]] = value
    for index in sorted(gpus):
        gpu = gpus[index]
        text = [f"GPU{index}"]
        if "utilization_percentage" in gpu:
            text.append(f"{gpu['utilization_percentage']:.0f}%")
        if "memory_usage_megabytes" in gpu:
            text.append(_gb(gpu["memory_usage_megabytes"]))
        if "power_usage_watts" in gpu:
            text.append(f"{gpu['power_usage_watts']:.0f} W")
        if "tensorflow_memory_peak_megabytes" in gpu:
            text.append(f"(TF peak {_gb(gpu['tensorflow_memory_peak_megabytes'])})")
        parts.append(" ".join(text))
    if not gpus:  # said in short; the event log keeps the whole sentence
        reason = (notice or "no GPU").split(";")[0]
        parts.append("NVML absent" if reason.startswith("NVML absent") else reason)
    return "machine: " + " · ".join(parts)


def _size(megabytes: float) -> str:
    return f"{megabytes:.0f} MB" if megabytes < 1000 else _gb(megabytes)


def _numbers(values: Mapping[str, object]) -> dict[str, float]:
    return {k: v for k, v in values.items() if isinstance(v, float)}


def process_figures(values: Mapping[str, object]) -> tuple[str, str]:
    """This process's CPU (``97%``, of one core) and resident memory (``1.1 GB``); ``-`` for none."""
    number = _numbers(values)
    cpu = f"{number[_PROCESS_CPU]:.0f}%" if _PROCESS_CPU in number else "-"
    rss = _gb(number[_PROCESS_MEMORY]) if _PROCESS_MEMORY in number else "-"
    return cpu, rss


def gpu_figures(values: Mapping[str, object], notice: str | None) -> str:
    """Each GPU the process uses: ``GPU0 88% 9.8 GB``; where none is sampled, why, in short."""
    gpus: dict[int, dict[str, float]] = {}
    for key, value in _numbers(values).items():
        found = system_gpu_of(key)
        if found is not None:
            gpus.setdefault(found[0], {})[found[1]] = value
    parts = []
    for index in sorted(gpus):
        gpu, text = gpus[index], [f"GPU{index}"]
        if "utilization_percentage" in gpu:
            text.append(f"{gpu['utilization_percentage']:.0f}%")
        if "memory_usage_megabytes" in gpu:
            text.append(_gb(gpu["memory_usage_megabytes"]))
        parts.append(" ".join(text))
    if parts:
        return ", ".join(parts)
    reason = (notice or "no GPU").split(";")[0]
    return "NVML absent" if reason.startswith("NVML absent") else reason.split(":")[0]


def host_figures(values: Mapping[str, object]) -> str:
    """The host's own figures, said once per host: ``CPU 34% · memory 5.2 GB (33%) · disk 40% ·
    network in 1.2 GB / out 310 MB`` (what is missing is left out)."""
    number = _numbers(values)
    parts = []
    if _CPU in number:
        parts.append(f"CPU {number[_CPU]:.0f}%")
    if _MEMORY in number:
        percent = f" ({number[_MEMORY_PERCENT]:.0f}%)" if _MEMORY_PERCENT in number else ""
        parts.append(f"memory {_gb(number[_MEMORY])}{percent}")
    if _DISK_PERCENT in number:  # how full the root file system is (its size: in the event log)
        parts.append(f"disk {number[_DISK_PERCENT]:.0f}%")
    elif _DISK in number:
        parts.append(f"disk {_gb(number[_DISK])}")
    if _RECEIVED in number or _SENT in number:
        received = _size(number[_RECEIVED]) if _RECEIVED in number else "-"
        sent = _size(number[_SENT]) if _SENT in number else "-"
        parts.append(f"network in {received} / out {sent}")
    return " · ".join(parts) or "-"
