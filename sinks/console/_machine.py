"""The dashboard's machine line: the last sample of the machine in one line of text."""

from __future__ import annotations

from collections.abc import Mapping

from hookbus.sink_api import system_gpu_of

__all__ = ["machine_line"]

_CPU = "system/cpu_utilization_percentage"
_MEMORY = "system/system_memory_usage_megabytes"
_MEMORY_PERCENT = "system/system_memory_usage_percentage"
_PROCESS_CPU = "system/process_cpu_utilization_percentage"
_PROCESS_MEMORY = "system/process_memory_rss_megabytes"


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
