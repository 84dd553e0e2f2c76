"""Reading the machine: real psutil readings checked against /proc, and NVML's path through a
stand-in module (this machine has no GPU; NVML cannot run here)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hookbus._bus._machine import Machine, cuda_visible
from hookbus.sink_api import SYSTEM_NOTICE_KEY, system_gpu_key, system_gpu_of

linux = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")


def _proc_kib(path: str, field_name: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field_name} not in {path}")


@linux
def test_this_process_resident_memory_is_what_proc_says() -> None:
    machine = Machine()
    machine.open()
    ballast = bytearray(64 * 1024 * 1024)  # 64 MiB touched: the reading must move with it
    ballast[::4096] = b"x" * len(ballast[::4096])
    before = _proc_kib("/proc/self/status", "VmRSS") * 1024 / 1e6
    read = machine.read()["system/process_memory_rss_megabytes"]
    after = _proc_kib("/proc/self/status", "VmRSS") * 1024 / 1e6
    assert min(before, after) - 2 <= read <= max(before, after) + 2  # MB; pages may come and go between
    assert read > 64  # the ballast is in it
    machine.close()
    del ballast


@linux
def test_the_hosts_memory_and_disk_are_what_proc_and_statvfs_say() -> None:
    machine = Machine()
    machine.open()
    values = machine.read()
    total = _proc_kib("/proc/meminfo", "MemTotal") * 1024 / 1e6
    available = _proc_kib("/proc/meminfo", "MemAvailable") * 1024 / 1e6
    used, percent = values["system/system_memory_usage_megabytes"], values["system/system_memory_usage_percentage"]
    assert 0 < used < total
    # psutil's percent is (total - available) / total; allow for memory moving between the reads.
    assert abs(percent - 100 * (total - available) / total) < 5
    stat = os.statvfs("/")
    free = stat.f_bavail * stat.f_frsize / 1e6
    assert abs(values["system/disk_available_megabytes"] - free) < max(50.0, 0.01 * free)
    assert 0 <= values["system/cpu_utilization_percentage"] <= 100
    assert values["system/process_cpu_utilization_percentage"] >= 0
    assert values["system/network_receive_megabytes"] >= 0  # counted from open()
    machine.close()


@linux
def test_this_process_cpu_counts_the_work_it_did() -> None:
    """Busy for a while between two readings: the process's share is positive and /proc's
    utime+stime moved by about as much as psutil says (percent of one core over the wall time)."""
    import time

    machine = Machine()
    machine.open()
    machine.read()
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu_seconds() -> float:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    start_cpu, start = cpu_seconds(), time.monotonic()
    x = 0
    while cpu_seconds() - start_cpu < 0.3:  # work, counted by the kernel, not by a clock
        x += sum(range(1000))
    percent = machine.read()["system/process_cpu_utilization_percentage"]
    proc_percent = 100 * (cpu_seconds() - start_cpu) / (time.monotonic() - start)
    assert percent > 0
    assert abs(percent - proc_percent) < max(25.0, 0.5 * proc_percent)  # the same measure, read twice
    machine.close()


# -- NVML, through a stand-in ---------------------------------------------------------------------
class NVMLError(Exception):
    pass


@dataclass
class FakeGPU:
    uuid: str
    utilization: int = 50
    used: int = 2_000_000_000
    total: int = 8_000_000_000
    power_mw: int | None = 100_000
    limit_mw: int = 250_000


@dataclass
class FakeNVML:
    """The few pynvml calls the reader makes, over a list of GPUs in NVML's (PCI) order."""

    gpus: list[FakeGPU] = field(default_factory=list)
    init_error: str | None = None
    calls: list[str] = field(default_factory=list)

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: FakeGPU) -> bytes:
        return handle.uuid.encode()  # older bindings return bytes

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGPU) -> Any:
        return type("Rates", (), {"gpu": handle.utilization, "memory": 10})()

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGPU) -> Any:
        return type("Memory", (), {"used": handle.used, "total": handle.total, "free": handle.total - handle.used})()

    def nvmlDeviceGetPowerUsage(self, handle: FakeGPU) -> int:
        if handle.power_mw is None:
            raise NVMLError("Not Supported")
        return handle.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGPU) -> int:
        return handle.limit_mw


def _four() -> FakeNVML:
    return FakeNVML(
        [FakeGPU(f"GPU-{i}aaa-{i}", utilization=10 * (i + 1), used=(i + 1) * 1_000_000_000) for i in range(4)]
    )


def _gpus(values: dict[str, float]) -> dict[int, dict[str, float]]:
    found: dict[int, dict[str, float]] = {}
    for key, value in values.items():
        parsed = system_gpu_of(key)
        if parsed is not None:
            found.setdefault(parsed[0], {})[parsed[1]] = value
    return found


def test_every_gpu_is_sampled_when_cuda_shows_them_all_under_mlflows_names() -> None:
    nvml = _four()
    machine = Machine(nvml=nvml, environ={})
    assert machine.open() is None
    values = machine.read()
    assert values[system_gpu_key(0, "utilization_percentage")] == 10.0
    assert values["system/gpu_3_memory_usage_megabytes"] == 4000.0
    assert values["system/gpu_1_memory_usage_percentage"] == 25.0
    assert values["system/gpu_2_power_usage_watts"] == 100.0
    assert values["system/gpu_2_power_usage_percentage"] == 40.0
    assert sorted(_gpus(values)) == [0, 1, 2, 3]
    machine.close()
    machine.close()
    assert nvml.calls == ["init", "shutdown"]


@pytest.mark.parametrize(
    ("visible", "tf_gpus", "expected"),
    [
        ("2,0", None, {0: 30.0, 1: 10.0}),  # CUDA's order: /GPU:0 is NVML's 2
        ("GPU-3aaa", None, {0: 40.0}),  # a UUID prefix, as CUDA takes it
        ("1,7,2", None, {0: 20.0}),  # CUDA reads no further than an entry that names no GPU
        ("3,2,1", [1], {0: 30.0}),  # TensorFlow uses only the second GPU CUDA shows
    ],
)
def test_only_the_gpus_this_process_uses_are_sampled_numbered_as_tensorflow_numbers_them(
    visible: str, tf_gpus: list[int] | None, expected: dict[int, float]
) -> None:
    machine = Machine(nvml=_four(), environ={"CUDA_VISIBLE_DEVICES": visible}, tf_gpus=tf_gpus)
    assert machine.open() is None
    used = _gpus(machine.read())
    assert {i: gpu["utilization_percentage"] for i, gpu in used.items()} == expected


@pytest.mark.parametrize(
    ("nvml", "environ", "tf_gpus", "notice"),
    [
        (FakeNVML(init_error="Driver Not Loaded"), {}, None, "NVML absent: Driver Not Loaded"),
        (FakeNVML(), {}, None, "no GPU: NVML sees no GPU on this host"),
        (_four(), {"CUDA_VISIBLE_DEVICES": ""}, None, "no GPU: CUDA_VISIBLE_DEVICES='' shows this process none"),
        (_four(), {"CUDA_VISIBLE_DEVICES": "-1"}, None, "none of the host's 4 GPUs"),
        (_four(), {}, [], "no GPU: TensorFlow uses none of the 4 GPUs"),
    ],
    ids=["no-driver", "no-gpu", "hidden", "minus-one", "tf-uses-none"],
)
def test_where_no_gpu_is_sampled_the_reader_says_why(
    nvml: FakeNVML, environ: dict[str, str], tf_gpus: list[int] | None, notice: str
) -> None:
    machine = Machine(nvml=nvml, environ=environ, tf_gpus=tf_gpus)
    said = machine.open()
    assert said is not None
    assert notice in said
    assert _gpus(machine.read()) == {}
    assert not machine.worrying  # a host without GPUs for this process, as asked: a fact, not a warning


@pytest.mark.parametrize(
    ("nvml", "environ", "worrying"),
    [
        (FakeNVML(init_error="Driver Not Loaded"), {"CUDA_VISIBLE_DEVICES": "1"}, True),
        (FakeNVML(init_error="Driver Not Loaded"), {"CUDA_VISIBLE_DEVICES": "GPU-ab"}, True),
        (FakeNVML(init_error="Driver Not Loaded"), {"CUDA_VISIBLE_DEVICES": "-1"}, False),
        (FakeNVML(init_error="Driver Not Loaded"), {}, False),
    ],
    ids=["asked-for-gpu-1", "asked-by-uuid", "asked-for-none", "not-asked"],
)
def test_a_missing_driver_is_warned_about_only_where_the_process_was_given_gpus(
    nvml: FakeNVML, environ: dict[str, str], worrying: bool
) -> None:
    machine = Machine(nvml=nvml, environ=environ)
    assert machine.open() is not None
    assert machine.worrying is worrying


def test_without_the_nvml_package_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    machine = Machine()
    said = machine.open()
    assert said is not None
    assert said.startswith("NVML absent: the nvidia-ml-py package is not installed")
    assert machine.worrying  # the GPU library hookbus depends on is missing: a warning


def test_the_real_nvml_binding_on_this_gpu_less_machine_says_nvml_is_absent() -> None:
    pytest.importorskip("pynvml")
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this machine has an NVIDIA driver")
    said = Machine().open()
    assert said is not None
    assert said.startswith("NVML absent")


def test_a_measure_a_gpu_does_not_take_is_left_out_and_the_allocator_is_read() -> None:
    nvml = FakeNVML([FakeGPU("GPU-x", power_mw=None)])
    machine = Machine(nvml=nvml, environ={}, allocator=lambda: {0: (3_000_000, 5_000_000)})
    machine.open()
    values = machine.read()
    assert "system/gpu_0_power_usage_watts" not in values
    assert values["system/gpu_0_utilization_percentage"] == 50.0
    assert values["system/gpu_0_tensorflow_memory_current_megabytes"] == 3.0
    assert values["system/gpu_0_tensorflow_memory_peak_megabytes"] == 5.0
    assert SYSTEM_NOTICE_KEY not in values


def test_cuda_visible_parses_indices_uuids_and_stops_at_the_first_unknown() -> None:
    uuids = ["GPU-aa", "GPU-ab", "GPU-c"]
    assert cuda_visible({}, uuids) is None
    assert cuda_visible({"CUDA_VISIBLE_DEVICES": "GPU-c, 0"}, uuids) == [2, 0]
    assert cuda_visible({"CUDA_VISIBLE_DEVICES": "GPU-a,1"}, uuids) == []  # ambiguous prefix: no GPU
    assert cuda_visible({"CUDA_VISIBLE_DEVICES": "0,0"}, uuids) == [0]  # a GPU is never sampled twice
