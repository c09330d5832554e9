"""One kernel's compile for sm_75 with TensorCore75: which stages run, and the way back to Triton's own lowering.

Triton builds a kernel as a chain of stages (ttir -> ttgir -> llir -> ptx -> cubin). For a kernel whose dots qualify
(eligibility.py), the ttgir stage is the retargeted one (retarget.py). If anything after that fails or shows an
instruction sm_75 lacks, the kernel is rebuilt from its saved TTIR with Triton's own stages, so a retargeting problem
costs speed, never a failed compile. The decision is written into the kernel's metadata (METADATA_KEY), which Triton
stores with the binary: the census reads it back for kernels loaded from the cache too.

A retargeted kernel is assembled in its ptx stage: when ptxas spilled below the register budget its shared memory
leaves (registers.py), the PTX gets `.maxnreg` and is assembled again, and the stage returns the text of the binary
kept, which the cubin stage then hands on unchanged: the PTX Triton stores is always the source of its cubin. Every
sm_75 binary, retargeted or kept, has its registers and local memory (read from the cubin, cubin.py) in the
metadata (REGISTERS_KEY, LOCAL_BYTES_KEY, MAXNREG_KEY): the autotune pruning (autotune.py) reads them there. A
failure of this register step keeps the binary ptxas built first: it costs speed, never a compile.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from caovan_kernels.errors import RetargetRefused

from .cubin import kernel_resources
from .eligibility import classify
from .registers import Binary, spend_register_budget
from .retarget import check_llir, parse_module, turing_mma_ttgir

METADATA_KEY = "caovan_tc75"
REGISTERS_KEY = "caovan_tc75_registers"  # registers per thread of the sm_75 binary
LOCAL_BYTES_KEY = "caovan_tc75_local_bytes"  # its local memory per thread (register spills, local arrays)
MAXNREG_KEY = "caovan_tc75_maxnreg"  # the .maxnreg the register step added to the PTX; 0: ptxas's own choice
# A block may use at most 64 KB of shared memory on Turing: a retargeted kernel that needs more would not launch
# there, while Triton's own lowering of it might.
TURING_SHARED_BYTES = 64 * 1024
_RETARGETED = "mma"  # metadata values: "mma:fp16", "kept:fp32_dot", "kept:fallback", ...
_ORDER = ("ttgir", "llir", "ptx", "cubin")  # the stages a fallback reruns, in Triton's order

Stage = Callable[[Any, dict], Any]
FallbackReport = Callable[[str, str], None]  # (kernel name, what failed)


def decision_text(retargeted: bool, reason: str) -> str:
    return f"{_RETARGETED if retargeted else 'kept'}:{reason}"


def parse_decision(text: str) -> tuple[bool, str]:
    kind, _, reason = text.partition(":")
    return kind == _RETARGETED, reason


class KernelCompile:
    """Stage functions for one sm_75 compile; `install` puts them into Triton's stage table."""

    def __init__(self, backend: Any, stages: dict[str, Stage], options: Any, int8: bool,
                 on_fallback: FallbackReport, on_register_step: FallbackReport) -> None:
        self.backend = backend
        self.options = options
        self.stock = dict(stages)
        self.int8 = int8
        self.on_fallback = on_fallback
        self.on_register_step = on_register_step
        self.ttir_text: str | None = None  # set while the kernel is on the retargeted path
        self.context: Any = None
        self.kernel = "kernel"
        self.assembled: tuple[str, bytes] | None = None  # (PTX, its cubin), built by the retargeted ptx stage

    def install(self, stages: dict[str, Stage]) -> None:
        stages["ttgir"] = self.ttgir
        for name in ("llir", "ptx"):
            if name in stages:
                stages[name] = functools.partial(self._run, name)
        stages["cubin"] = self.cubin

    def ttgir(self, src: Any, metadata: dict) -> Any:
        text = str(src)
        self.kernel = src.get_entry_func_name()
        verdict = classify(text, int8=self.int8)
        if not verdict.retarget:
            metadata[METADATA_KEY] = decision_text(False, verdict.reason)
            return self.stock["ttgir"](src, metadata)
        self.ttir_text, self.context = text, src.context
        try:
            module = turing_mma_ttgir(self.backend, src, metadata, self.options)
        except RetargetRefused as refused:
            return self._fall_back(metadata, "ttgir", refused.what)
        metadata[METADATA_KEY] = decision_text(True, verdict.reason)
        return module

    def _run(self, name: str, src: Any, metadata: dict) -> Any:
        """Triton's stage `name`, with the checks of the retargeted path while the kernel is on it."""
        if self.ttir_text is None:
            return self.stock[name](src, metadata)
        try:
            out = self.stock[name](src, metadata)
            if name == "llir":
                check_llir(out)
                if metadata["shared"] > TURING_SHARED_BYTES:
                    raise RetargetRefused(f"{metadata['shared']} bytes of shared memory, Turing has "
                                          f"{TURING_SHARED_BYTES} per block")
            if name == "ptx":
                out = self._assemble(out, metadata)
            return out
        # Any failure of the retargeted path (a lowering error, ptxas refusing the PTX) sends the kernel back to
        # Triton's own lowering: a slower kernel beats a failed compile in a user's engine.
        except Exception as exc:  # noqa: BLE001
            what = exc.what if isinstance(exc, RetargetRefused) else f"{type(exc).__name__} in the {name} stage"
            return self._fall_back(metadata, name, what)

    def _fall_back(self, metadata: dict, upto: str, what: str) -> Any:
        """Triton's own stages from the saved TTIR up to and including `upto`."""
        text, self.ttir_text = self.ttir_text, None
        metadata[METADATA_KEY] = decision_text(False, "fallback")
        self.on_fallback(self.kernel, what)
        out = parse_module(text, self.context)
        for name in _ORDER[: _ORDER.index(upto) + 1]:
            out = self.stock[name](out, metadata)
        return out

    def _assemble(self, ptx: str, metadata: dict) -> str:
        """ptxas for the retargeted PTX, and again with `.maxnreg` where that spills less; the PTX of the binary kept.
        A ptxas failure on `ptx` itself propagates (the caller falls back to Triton's lowering)."""
        cubin = self.stock["cubin"](ptx, metadata)
        self.assembled = (ptx, cubin)
        first = self._read(ptx, cubin, metadata)
        if first is None:
            return ptx
        try:
            chosen = spend_register_budget(first, metadata["name"], self.options.num_warps, metadata["shared"],
                                           lambda text: self.stock["cubin"](text, metadata))
        # The rebuild is an improvement, not a requirement: whatever goes wrong in it keeps ptxas's first binary.
        except Exception as exc:  # noqa: BLE001
            self.on_register_step(self.kernel, f"{_first_line(exc)} in the .maxnreg rebuild")
            chosen = first
        self.assembled = (chosen.ptx, chosen.cubin)
        _record(metadata, chosen)
        return chosen.ptx

    def cubin(self, src: Any, metadata: dict) -> Any:
        assembled, self.assembled = self.assembled, None
        if assembled is not None and assembled[0] == src:
            return assembled[1]  # its registers are in the metadata already
        # Kept kernels, fallbacks, and a PTX some later hook or override rewrote: Triton's own cubin stage.
        out = self._run("cubin", src, metadata)
        binary = self._read(src, out, metadata)
        if binary is not None:
            _record(metadata, binary)
        return out

    def _read(self, ptx: str, cubin: bytes, metadata: dict) -> Binary | None:
        """The binary with its registers and local memory; None (reported) when the cubin cannot be read: the kernel
        then carries no register keys, and the autotune pruning leaves its configurations alone."""
        try:
            return Binary(ptx, cubin, kernel_resources(cubin, metadata["name"]), 0)
        except Exception as exc:  # noqa: BLE001 - a reader problem must not fail the compile
            self.on_register_step(self.kernel, f"{_first_line(exc)} reading the binary")
            return None


def _record(metadata: dict, binary: Binary) -> None:
    metadata[REGISTERS_KEY] = binary.resources.registers
    metadata[LOCAL_BYTES_KEY] = binary.resources.local_bytes
    metadata[MAXNREG_KEY] = binary.maxnreg


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__
