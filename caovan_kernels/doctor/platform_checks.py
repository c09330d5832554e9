"""Python, torch and its CUDA runtime, and each GPU NVML reports."""

from __future__ import annotations

import platform
import sys

from caovan_kernels.profile.gpus import GIB, Inventory
from caovan_kernels.profile.vllm_abilities import INSTALL_VLLM, INSTALL_VLLM_CUDA

from .report import Check, CheckStatus

MIN_PYTHON = (3, 10)
MIN_SM = 75  # Caovan's kernels and vLLM's Triton attention start at Turing


def check_python() -> list[Check]:
    version = platform.python_version()
    if sys.version_info[:2] < MIN_PYTHON:
        return [Check("python", "Python", CheckStatus.FAIL, f"{version} at {sys.executable}",
                      f"use Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer (a new virtual environment)")]
    return [Check("python", "Python", CheckStatus.PASS, f"{version} at {sys.executable}")]


def check_torch(inventory: Inventory) -> list[Check]:
    try:
        import torch
    except ImportError as exc:
        return [Check("torch", "torch", CheckStatus.FAIL, f"not importable ({exc})",
                      f"install vLLM, which pins its torch: {INSTALL_VLLM}")]
    cuda = torch.version.cuda
    if cuda is None:
        if inventory.gpus:
            return [Check("torch", "torch", CheckStatus.WARN,
                          f"{torch.__version__} is a CPU build but NVML sees {len(inventory.gpus)} GPU(s)",
                          f"install the CUDA build of vLLM ({INSTALL_VLLM_CUDA}), which brings CUDA torch")]
        return [Check("torch", "torch", CheckStatus.PASS, f"{torch.__version__}, CPU build (no CUDA runtime)")]
    available = torch.cuda.is_available()
    detail = f"{torch.__version__}, CUDA runtime {cuda}, {torch.cuda.device_count() if available else 0} device(s)"
    if inventory.gpus and not available:
        return [Check("torch", "torch", CheckStatus.FAIL, detail + ": CUDA not available to torch",
                      "check the NVIDIA driver supports CUDA " + cuda + " (nvidia-smi) and CUDA_VISIBLE_DEVICES")]
    return [Check("torch", "torch", CheckStatus.PASS, detail)]


def check_gpus(inventory: Inventory) -> list[Check]:
    if not inventory.gpus:
        return [Check("gpus", "GPUs", CheckStatus.SKIP, f"no GPU: {inventory.source}",
                      "none needed for the CPU build; for GPUs install the NVIDIA driver and nvidia-ml-py")]
    checks = []
    for g in inventory.gpus:
        detail = (f"{g.name}, sm{g.sm}, {g.total_bytes / GIB:.1f} GiB ({g.free_bytes / GIB:.1f} GiB free)"
                  + (", NVLink" if g.nvlink else ""))
        if g.sm < MIN_SM:
            checks.append(Check("gpus", f"GPU {g.index}", CheckStatus.WARN, detail,
                                f"sm{g.sm} is older than Turing (sm75): Caovan's kernels do not target it"))
        else:
            checks.append(Check("gpus", f"GPU {g.index}", CheckStatus.PASS, detail))
    return checks
