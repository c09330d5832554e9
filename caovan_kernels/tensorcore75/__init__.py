"""TensorCore75: Turing tensor cores for Triton kernels compiled for sm_75 by Triton 3.4+ (which lowers every dot to
FMA there). See docs/tensorcore75.md.

One object per process owns the hook's state (`process()`): `activate(mode)` decides, attaches or detaches, and
reports; the plugin calls it in every vLLM process, the doctor and the tools call it directly.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from caovan_kernels import contract
from caovan_kernels.errors import TuringMmaConfigError
from caovan_kernels.logger import log
from caovan_kernels.profile.gpus import detect_gpus

from .autotune import AutotunePruning
from .cache import TaggedCache, hook_tag
from .census import Census, Counts
from .pipeline import KernelCompile
from .seam import TritonCompileSeam, triton_keys_hook, version_tuple

TURING = 75
# Triton releases whose sm_75 pipeline this was checked against (tests/sm75/test_triton_versions.py); others are
# left alone: their lowering may differ in ways the rewrite does not expect.
TESTED_TRITON = ((3, 4), (3, 5), (3, 6), (3, 7), (3, 8), (3, 9))
# int8 dots go to mma.sync m8n8k16: exact against torch on the Turing proxy (scripts/check_turing_mma_probes.py,
# 2026-12-01), where Triton's own sm_75 lowering cannot compile them at all.
RETARGET_INT8 = True


def validate_mode(value: str, where: str) -> str:
    mode = value.strip().lower()
    if mode not in contract.TENSORCORE75_MODES:
        raise TuringMmaConfigError(
            f"Caovan: {where} is {value!r}; use auto (tensor cores where Triton compiles for sm_75), off (Triton's "
            "own FMA lowering) or force (retarget sm_75 compiles even without a Turing GPU: compile checks, the "
            "Turing proxy)"
        )
    return mode


@dataclass(frozen=True)
class RetargetStatus:
    """Whether this process's sm_75 compiles are retargeted, under which mode and Triton, and why."""

    active: bool
    mode: str
    triton: str
    detail: str

    def line(self) -> str:
        return contract.tensorcore75_status_line(self.active, self.triton, self.mode, self.detail)


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def sm75_compile_target() -> tuple[bool, str]:
    """Whether Triton compiles for sm_75 in this process, and why; read without initialising CUDA (NVML), since
    vLLM's API server must not touch CUDA before it forks its engine."""
    override = os.environ.get("TRITON_OVERRIDE_ARCH")
    if override:
        return override == "sm75", f"TRITON_OVERRIDE_ARCH={override}"
    inventory = detect_gpus()
    turing = [gpu for gpu in inventory.gpus if gpu.capability == (7, 5)]
    if turing:
        return True, f"{turing[0].describe()}"
    if inventory.gpus:
        gpu = inventory.gpus[0]
        return False, f"the GPUs are sm_{gpu.sm} ({gpu.name}), where Triton uses tensor cores itself"
    return False, f"no NVIDIA GPU ({inventory.source}); caovan_turing_mma=force retargets sm_75 compiles anyway"


class TensorCore75Hook:
    """The process's hook: its mode, whether it is attached, and its census."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self._log = log
        self._lock = threading.Lock()
        self.census = Census(log)
        self._seam = TritonCompileSeam(self._on_stages, hook_tag)
        self._cache = TaggedCache()
        self.autotune = AutotunePruning(log)
        self._status: RetargetStatus | None = None

    @property
    def status(self) -> RetargetStatus | None:
        return self._status

    def activate(self, mode: str) -> RetargetStatus:
        """Decide for `mode`, attach or detach accordingly, log the status line when it changes."""
        mode = validate_mode(mode, "caovan_turing_mma")
        with self._lock:
            status = self._decide(mode)
            if status.active:
                if not triton_keys_hook():
                    self._cache.attach()  # Triton 3.7+ puts the hook's tag into its cache keys itself
                self.census.attach()
                self._seam.attach()
                self.autotune.attach()
            else:
                self.autotune.detach()
                self._seam.detach()
                self.census.detach()
                self._cache.detach()
            changed = status != self._status
            self._status = status
        if changed:
            self._log(status.line())
        return status

    def _decide(self, mode: str) -> RetargetStatus:
        version = _triton_version()
        if version is None:
            return RetargetStatus(False, mode, "none", "Triton is not importable")
        if mode == "off":
            return RetargetStatus(False, mode, version,
                                  "caovan_turing_mma=off: Triton's own lowering (FMA dots on sm_75)")
        if version_tuple(version) not in TESTED_TRITON:
            tested = ", ".join(f"{a}.{b}" for a, b in TESTED_TRITON)
            return RetargetStatus(False, mode, version,
                                  f"Triton {version} is outside the tested set ({tested}): left alone")
        if mode == "auto":
            on, why = sm75_compile_target()
            if not on:
                return RetargetStatus(False, mode, version, f"no sm_75 compile target: {why}")
        else:
            why = "caovan_turing_mma=force"
        int8 = ", int8 on m8n8k16" if RETARGET_INT8 else ""
        return RetargetStatus(True, mode, version,
                              f"fp16 dots on mma.sync m16n8k8{int8} for sm_75 compiles ({why}; {self._seam.kind}, "
                              f"cache tag {hook_tag()})")

    def _on_stages(self, backend: Any, stages: dict, options: Any, language: Any, capability: int) -> None:
        from triton.backends.compiler import Language

        if capability != TURING or language != Language.TRITON:
            return
        KernelCompile(backend, stages, options, RETARGET_INT8, self._on_fallback,
                      self._on_register_step).install(stages)

    def _on_fallback(self, kernel: str, what: str) -> None:
        self._log(f"{contract.TENSORCORE75} {kernel}: retargeting refused ({what}); Triton's own lowering used")

    def _on_register_step(self, kernel: str, what: str) -> None:
        self._log(f"{contract.TENSORCORE75} {kernel}: register step skipped ({what}); the binary ptxas built without "
                  ".maxnreg is kept")

    def counts(self) -> Counts:
        return self.census.snapshot()


_process: TensorCore75Hook | None = None


def retargets_fp16_dots() -> bool:
    """Whether this process's sm_75 compiles put fp16 dots on tensor cores (kernels that size themselves by it ask
    here; it creates nothing)."""
    status = None if _process is None else _process.status
    return status is not None and status.active


def process() -> TensorCore75Hook:
    """This process's TensorCore75 hook (created on first use, logging through the plugin's logger)."""
    global _process
    if _process is None:
        _process = TensorCore75Hook(log)
    return _process
