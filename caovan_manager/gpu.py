"""NVML, where it exists: GPU memory held by the engine's processes, and the GPU figures /metrics shows."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

try:
    import pynvml
except ImportError:  # nvidia-ml-py is a dependency, but a broken install must not stop a CPU-only daemon
    pynvml = None

_lock = threading.Lock()
_state = {"initialised": False, "usable": False}


def nvml_usable() -> bool:
    """True once NVML initialised and sees a GPU; tried once per daemon."""
    with _lock:
        if not _state["initialised"]:
            _state["initialised"] = True
            try:
                pynvml.nvmlInit()
                _state["usable"] = pynvml.nvmlDeviceGetCount() > 0
            except Exception:  # noqa: BLE001  (no driver, no library, no device: all mean "no NVML")
                _state["usable"] = False
        return _state["usable"]


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    memory_used_bytes: int
    memory_total_bytes: int
    utilization_pct: float
    temperature_c: float
    power_w: float


def gpu_samples() -> list[GpuSample]:
    if not nvml_usable():
        return []
    samples = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        name = pynvml.nvmlDeviceGetName(handle)
        samples.append(GpuSample(
            index=index,
            name=name.decode() if isinstance(name, bytes) else name,
            memory_used_bytes=int(memory.used),
            memory_total_bytes=int(memory.total),
            utilization_pct=float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            temperature_c=float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
            power_w=pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        ))
    return samples


def gpu_holders(pids: set[int]) -> list[str]:
    """Which of `pids` still hold GPU memory, as 'pid P on GPU I (N MiB)'."""
    if not nvml_usable() or not pids:
        return []
    held = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid in pids:
                used = (proc.usedGpuMemory or 0) // (1 << 20)
                held.append(f"pid {proc.pid} on GPU {index} ({used} MiB)")
    return held


async def wait_gpu_released(pids: set[int], timeout_s: float, poll_s: float = 0.5) -> list[str]:
    """Wait until none of `pids` holds GPU memory; returns the holders left at the timeout (empty = released)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        held = await asyncio.to_thread(gpu_holders, pids)
        if not held or loop.time() >= deadline:
            return held
        await asyncio.sleep(poll_s)
