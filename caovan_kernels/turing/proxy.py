"""The Turing proxy: the code a 2080 Ti runs, run on any NVIDIA GPU.

`TRITON_OVERRIDE_ARCH=sm75` makes Triton lower every kernel through its sm_75 passes (capability 75 for ttir, ttgir
and llir: FMA dots, or TensorCore75's mma.sync m16n8k8) while PTX and cubin still target the real GPU, so the GPU
runs what a 2080 Ti would run. Triton's driver learns the real GPU from torch's capability query, which the device
view then answers with 7.5: the driver is therefore bound to the real query first. With the view on, libraries that
size launches from the device see a 2080 Ti (device_view.py), so a kernel that needs more than Turing's 64 KB of
shared memory per block fails as it would there.

What it cannot show: timings are of sm_75 code on other hardware (other clocks, memory, cache and SM count); only
ratios between implementations run the same way carry over, never absolute times. vLLM's own choices (attention
backend, GDN prefill backend) read the real device through NVML: force them for an engine run.

In Python: `enable()` (returns the function that undoes it). For a vLLM engine: `CAOVAN_TURING_PROXY=1` in its
environment (`arch` for the compile path without the device view); the plugin enables it in every engine process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from caovan_kernels import contract
from caovan_kernels.errors import ProxyConfigError

from .device_view import RTX_2080_TI, DeviceView, present_to_torch

ENV = "CAOVAN_TURING_PROXY"
# value -> (Triton sees the view's launch limits, torch sees its name and capability)
_VALUES = {"1": (True, True), "true": (True, True), "view": (True, True), "triton": (True, False), "arch": (False, False)}


class _RealTargetDriver:
    """Triton's own driver, created on first use, building for the real GPU and reporting the view's launch limits."""

    def __init__(self, real_capability: Callable[..., tuple[int, int]], view: DeviceView | None) -> None:
        object.__setattr__(self, "_setup", (real_capability, view))
        object.__setattr__(self, "_driver", None)

    def _real(self) -> Any:
        if self._driver is None:
            from triton.runtime import driver

            real_capability, view = self._setup
            real = driver.default
            real.get_device_capability = real_capability  # bound to torch's (now viewed) query when it was created
            if view is not None:
                properties = real.utils.get_device_properties
                real.utils.get_device_properties = lambda device: view.triton_properties(properties(device))
            object.__setattr__(self, "_driver", real)
        return self._driver

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._real(), name, value)


def enable(view: DeviceView | None = RTX_2080_TI, torch_view: bool = True) -> Callable[[], None]:
    """Run this process's Triton kernels on the sm_75 code path; `view=None` leaves the device as it is, and
    `torch_view=False` keeps torch's answers real (torch.compile builds its kernels for the device torch names, so
    an engine with compiled parts needs that)."""
    import torch
    from triton.runtime import driver

    previous_arch = os.environ.get("TRITON_OVERRIDE_ARCH")
    os.environ["TRITON_OVERRIDE_ARCH"] = "sm75"
    # read without creating one (creating needs a GPU): `_active` from Triton 3.5, `active` before
    previous_driver = vars(driver).get("_active", vars(driver).get("active"))
    driver.set_active(_RealTargetDriver(torch.cuda.get_device_capability, view))
    undo_view = present_to_torch(view) if view is not None and torch_view else (lambda: None)

    def disable() -> None:
        undo_view()
        driver.set_active(previous_driver)
        if previous_arch is None:
            os.environ.pop("TRITON_OVERRIDE_ARCH", None)
        else:
            os.environ["TRITON_OVERRIDE_ARCH"] = previous_arch

    return disable


def requested(env: dict[str, str] | None = None) -> tuple[bool, bool] | None:
    """From CAOVAN_TURING_PROXY: None (unset: no proxy), else (Triton sees the view, torch sees the view)."""
    value = (os.environ if env is None else env).get(ENV, "").strip().lower()
    if value in ("", "0", "false", "off"):
        return None
    if value not in _VALUES:
        raise ProxyConfigError(f"Caovan: {ENV}={value!r}; use 1 (sm_75 code path with a 2080 Ti device view), "
                               "triton (the view for Triton's launch limits only: engines with torch.compile), arch "
                               "(sm_75 code path, real device view) or 0")
    return _VALUES[value]


def enable_from_env() -> str | None:
    """Enable as CAOVAN_TURING_PROXY asks; returns the log line to print, or None when it is unset."""
    asked = requested()
    if asked is None:
        return None
    triton_view, torch_view = asked
    enable(RTX_2080_TI if triton_view else None, torch_view)
    view = (f"device view {RTX_2080_TI.name}" + ("" if torch_view else " for Triton's launch limits only")
            if triton_view else "real device view")
    return contract.turing_proxy_line(view)
