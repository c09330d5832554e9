"""Which TTIR qualifies for Turing tensor cores: the text-level decision (compiled cases: tests/sm75)."""

from __future__ import annotations

import pytest

from caovan_kernels.tensorcore75.eligibility import Verdict, classify


def _dot(a: str, b: str, extra: str = "") -> str:
    # the forms Triton 3.4-3.9 print (inputPrecision omitted when ieee)
    return f"    %8 = tt.dot %4, %7, %cst{extra} : tensor<64x64x{a}> * tensor<64x64x{b}> -> tensor<64x64xf32> loc(#loc1)\n"


@pytest.mark.parametrize(("ttir", "verdict"), [
    (_dot("f16", "f16", ", inputPrecision = tf32"), Verdict(True, "fp16")),
    (_dot("f16", "f16") + _dot("f16", "f16"), Verdict(True, "fp16")),
    (_dot("i8", "i8"), Verdict(True, "int8")),
    (_dot("f16", "f16") + _dot("i8", "i8"), Verdict(True, "fp16+int8")),
    (_dot("bf16", "bf16", ", inputPrecision = tf32"), Verdict(False, "bf16_dot")),
    (_dot("f32", "f32", ", inputPrecision = tf32"), Verdict(False, "fp32_dot")),
    (_dot("f32", "f32", ", inputPrecision = tf32x3"), Verdict(False, "fp32_dot")),
    (_dot("f32", "f32"), Verdict(False, "fp32_dot")),
    (_dot("f16", "f16") + _dot("f32", "f32"), Verdict(False, "fp32_dot")),
    (_dot("f8E4M3FN", "f8E4M3FN"), Verdict(False, "fp8_dot")),
    (_dot("f8E5M2", "f8E5M2", ", maxNumImpreciseAcc = 0"), Verdict(False, "fp8_dot")),
    (_dot("f16", "f8E5M2"), Verdict(False, "mixed_dot")),
    (_dot("f64", "f64"), Verdict(False, "f64_dot")),
    ("    %3 = arith.addf %1, %2 : tensor<128xf32>\n", Verdict(False, "no_dot")),
    ("    %5 = tt.dot_scaled %a scale %s, %b, %c lhs = e2m1 rhs = bf16\n" + _dot("f16", "f16"),
     Verdict(False, "scaled_dot")),
])
def test_classify(ttir: str, verdict: Verdict) -> None:
    assert classify(ttir, int8=True) == verdict


def test_int8_can_be_kept_off() -> None:
    assert classify(_dot("i8", "i8"), int8=False) == Verdict(False, "int8_dot")
