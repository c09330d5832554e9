"""Compile-only runs: real kernels through their real Python wrappers, compiled for sm_75, launched nowhere.

For checks on a machine without a GPU: a Triton driver that targets sm_75, answers device queries with a 2080 Ti
(device_view.py) and replaces every launch by nothing, so the wrappers' own shape logic, heuristics and autotuning
decide what gets compiled, exactly as on a Turing GPU. Outputs are never written: nothing numeric can be read from a
compile-only run. Autotuners see the same time for every configuration, so each one is compiled (a configuration
whose shared memory exceeds the 64 KB per block fails at its launch, as on Turing, and is skipped).

`make_process_compile_only()` turns the whole process into one: Triton's active driver and torch's device queries are
process-wide, and a machine without a GPU has no driver to go back to. Run it in a process of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .device_view import RTX_2080_TI, DeviceView, present_to_torch


class _NoLaunch:
    def __init__(self, src: Any, metadata: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        pass


class _Utils:
    def __init__(self, view: DeviceView) -> None:
        self.view = view

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple[int, int, int, int, int]:
        return 0, 0, 0, 0, 1024  # module, function, registers, spills, max threads per block

    def get_device_properties(self, device: int) -> dict[str, Any]:
        return self.view.triton_properties()


def _same_time_for_all(kernel_call: Any, quantiles: Sequence[float] | None = None, **kwargs: Any) -> Any:
    kernel_call()
    return [1.0] * len(quantiles) if quantiles else 1.0


def _driver_class() -> type:
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class CompileOnlyDriver(DriverBase):
        def __init__(self, view: DeviceView) -> None:
            self.utils = _Utils(view)
            self.launcher_cls = _NoLaunch
            self.capability = view.capability[0] * 10 + view.capability[1]

        @classmethod
        def is_active(cls) -> bool:
            return True

        def map_python_to_cpp_type(self, ty: str) -> str:
            return ty

        def get_current_target(self) -> Any:
            return GPUTarget("cuda", self.capability, 32)

        def get_active_torch_device(self) -> Any:
            return torch.device("cpu")

        def get_current_device(self) -> int:
            return 0

        def set_current_device(self, device: int) -> None:
            pass

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_device_interface(self) -> Any:
            return torch.cuda

        def get_benchmarker(self) -> Any:
            return _same_time_for_all

        def get_empty_cache_for_benchmark(self) -> Any:
            return torch.empty(1)

        def clear_cache(self, cache: Any) -> None:
            pass

    return CompileOnlyDriver


def make_process_compile_only(view: DeviceView = RTX_2080_TI) -> None:
    from triton.runtime import driver

    driver.set_active(_driver_class()(view))
    present_to_torch(view, device_count=1)
