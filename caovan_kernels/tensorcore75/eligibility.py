"""Which kernels may run their dots on Turing's tensor cores, read from the kernel's TTIR (before any GPU lowering).

Turing's tensor cores take fp16 operands (mma.sync m16n8k8, fp16 or fp32 accumulation) and int8 operands (m8n8k16,
int32 accumulation). They take no tf32, bf16 or fp8: a kernel with such a dot keeps Triton's own lowering, and so does a
kernel with any fp32 dot, whatever its precision: a kernel that mixes fp32 and fp16 dots was sized for FMA, and such
kernels spill registers once their fp16 dots use MMA layouts (measured with ptxas for sm_75).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# `%c = tt.dot %a, %b, %acc[, inputPrecision = tf32][, maxNumImpreciseAcc = 0] : tensor<AxBxf16> * tensor<..> -> ..`
_DOT = re.compile(r"\btt\.dot\s[^:\n]*:\s*tensor<(?P<a>[^<>]+)>\s*\*\s*tensor<(?P<b>[^<>]+)>")
_SCALED_DOT = re.compile(r"\btt\.dot_scaled\b")


@dataclass(frozen=True)
class Verdict:
    retarget: bool
    reason: str  # retargeted: "fp16" or "fp16+int8"...; kept: a short key such as "fp32_dot" or "no_dot"


def _element(tensor_type: str) -> str:
    return tensor_type.rsplit("x", 1)[-1].strip()


def _dot_class(a: str, b: str, int8: bool) -> str:
    """"fp16" / "int8": tensor cores; anything else: why the kernel is kept."""
    if a != b:
        return "mixed_dot"
    if a == "f16":
        return "fp16"
    if a == "i8":
        return "int8" if int8 else "int8_dot"
    if a == "f32":
        return "fp32_dot"  # tf32 mma is sm_80
    if a.startswith("f8"):
        return "fp8_dot"  # fp8 mma is sm_89
    return f"{a.lower()}_dot"  # bf16 (sm_80), f64, ...


def classify(ttir: str, *, int8: bool) -> Verdict:
    """Decide for one kernel from its TTIR text; `int8` says whether int8 dots may be retargeted."""
    if _SCALED_DOT.search(ttir):
        return Verdict(False, "scaled_dot")
    classes = [_dot_class(_element(m["a"]), _element(m["b"]), int8) for m in _DOT.finditer(ttir)]
    if not classes:
        return Verdict(False, "no_dot")
    refused = [c for c in classes if c not in ("fp16", "int8")]
    if refused:
        return Verdict(False, refused[0])
    return Verdict(True, "+".join(sorted(set(classes))))
