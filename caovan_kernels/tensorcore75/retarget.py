"""Turing tensor-core code from an unmodified Triton: lower the kernel as for sm_80, then hand the result to the
sm_75 backend as Turing MMA.

Triton 3.4+ gives a kernel compiled for sm_75 FMA dots (AccelerateMatmul declines MMA below compute capability 8.0),
but it still carries the Turing MMA lowering (`nvidia_mma` version 2.1: mma.sync m16n8k8 for fp16, m8n8k16 for int8).
The sm_80 TTGIR pipeline with one stage (no cp.async software pipelining) produces MMA version 2.0 layouts that are
otherwise Turing-compatible; the target attribute and the MMA minor version are rewritten so the rest of the sm_75
pipeline (shared memory allocation, LLVM lowering, ptxas) treats the kernel as a Turing one. What the sm_80 pipeline
may still produce that Turing lacks is checked in the TTGIR and again in the LLVM IR.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from typing import Any

from caovan_kernels.errors import RetargetRefused

TURING = 75
AMPERE = 80

_TARGET_80 = re.compile(r'"cuda:80"')
_MMA_V2_0 = re.compile(r"(nvidia_mma<\{versionMajor = 2, versionMinor = )0\b")

# Operations and layouts the sm_80 pipeline can emit that have no sm_75 lowering.
_TTGIR_REFUSED = {
    "cp.async (async copies)": re.compile(r"\bttg\.async_(?:copy|commit|wait)"),
    # operations only: module attributes of that dialect (Triton 3.9's `"ttng.two-ctas" = false`) are harmless
    "Hopper/Blackwell ops": re.compile(r"(?m)(?:^\s*|=\s*)ttng\.\w+|\"ttng\.two-ctas\" = true"),
    "MMA v3+ (wgmma/tcgen05)": re.compile(r"versionMajor = [3-9]"),
    "warp specialization": re.compile(r"\bttg\.warp_specialize\b"),
}
# Instructions Triton writes as inline PTX or NVVM intrinsics that sm_75 does not have.
_LLIR_REFUSED = {
    "cp.async": re.compile(r"cp\.async"),
    "m16n8k16/k32 mma": re.compile(r"mma\.sync\.aligned\.m16n8k(?:16|32|4)\b"),
    "tf32/bf16 mma": re.compile(r"mma\.sync[^\"]*\.(?:tf32|bf16)"),
    "Hopper/Blackwell instructions": re.compile(r"wgmma|tcgen05|mbarrier|stmatrix|setmaxnreg|elect\.sync|griddepcontrol"),
    "redux.sync": re.compile(r"redux\.sync"),
}


def parse_module(text: str, context: Any) -> Any:
    """An MLIR module (TTIR or TTGIR) from its text; the stock lowering needs a fresh TTIR after a failed retarget.
    Triton parses MLIR from a file only."""
    from triton._C.libtriton import ir

    with tempfile.NamedTemporaryFile("w", suffix=".ttgir", delete=False) as handle:
        handle.write(text)
    try:
        module = ir.parse_mlir_module(handle.name, context)
    finally:
        os.unlink(handle.name)
    module.context = context
    return module


def turing_mma_ttgir(backend: Any, ttir: Any, metadata: dict, options: Any) -> Any:
    """TTGIR for sm_75 with the kernel's fp16/int8 dots on Turing MMA. Lowers `ttir` in place (as the stock stage
    does); raises RetargetRefused when the result needs an sm_80+ feature."""
    one_stage = dataclasses.replace(options, num_stages=1)
    ampere = backend.make_ttgir(ttir, metadata, one_stage, AMPERE)
    text = str(ampere)
    for what, pattern in _TTGIR_REFUSED.items():
        if pattern.search(text):
            raise RetargetRefused(what)
    text, targets = _TARGET_80.subn('"cuda:75"', text)
    if targets != 1:
        raise RetargetRefused(f"{targets} target attributes in the TTGIR (expected 1)")
    text = _MMA_V2_0.sub(r"\g<1>1", text)
    return parse_module(text, ttir.context)


def check_llir(llir: str) -> None:
    """Raise RetargetRefused if the lowered kernel uses an instruction sm_75 does not have."""
    for what, pattern in _LLIR_REFUSED.items():
        if pattern.search(llir):
            raise RetargetRefused(what)
