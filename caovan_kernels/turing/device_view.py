"""A 2080 Ti as libraries see it: what the Turing proxy and compile-only runs present instead of the real device.

Libraries size launches from the device: fla checks the name ("NVIDIA H" picks Hopper paths) and the capability,
reads the shared memory a block may use from Triton's device properties, and Triton itself refuses to launch a
kernel that needs more shared memory than that. Presenting a 2080 Ti there makes a kernel too big for Turing fail as
it would on one. torch's device properties object is left real: torch.compile builds its Triton kernels for the
device those name, and they must run on the real GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30


@dataclass(frozen=True)
class DeviceView:
    name: str
    capability: tuple[int, int]
    multiprocessors: int
    shared_per_block: int  # the opt-in maximum a kernel may use (Triton's max_shared_mem)
    total_memory: int
    sm_clock_khz: int
    mem_clock_khz: int
    mem_bus_width: int

    def triton_properties(self, real: dict[str, Any] | None = None) -> dict[str, Any]:
        """Triton's `get_device_properties` answer: the real one with the view's figures where they differ."""
        base = dict(real or {"max_num_regs": 65536, "warpSize": 32})
        base.update(max_shared_mem=self.shared_per_block, multiprocessor_count=self.multiprocessors,
                    sm_clock_rate=self.sm_clock_khz, mem_clock_rate=self.mem_clock_khz,
                    mem_bus_width=self.mem_bus_width)
        return base


# GeForce RTX 2080 Ti (TU102): 68 SMs, 64 KB shared memory per block (opt-in), boost 1545 MHz, 14 Gbps GDDR6 on a
# 352-bit bus (616 GB/s); the 22 GB memory of the modded cards Caovan's users run.
RTX_2080_TI = DeviceView(
    name="NVIDIA GeForce RTX 2080 Ti", capability=(7, 5), multiprocessors=68, shared_per_block=64 * 1024,
    total_memory=22 * GIB, sm_clock_khz=1_545_000, mem_clock_khz=7_000_000, mem_bus_width=352,
)


def present_to_torch(view: DeviceView, *, device_count: int | None = None) -> Callable[[], None]:
    """Make torch.cuda's name and capability queries answer with `view` (and `device_count`, when given, for runs
    without a GPU); returns the function that undoes it."""
    import torch

    saved = {name: getattr(torch.cuda, name) for name in ("get_device_name", "get_device_capability", "device_count")}

    def name(device: Any = None) -> str:
        return view.name

    def capability(device: Any = None) -> tuple[int, int]:
        return view.capability

    torch.cuda.get_device_name = name
    torch.cuda.get_device_capability = capability
    if device_count is not None:
        torch.cuda.device_count = lambda: device_count

    def undo() -> None:
        for attr, fn in saved.items():
            setattr(torch.cuda, attr, fn)

    return undo
