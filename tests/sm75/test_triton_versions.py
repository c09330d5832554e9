"""Every Triton release in TensorCore75's tested set gets the same decisions (scripts/install-triton-matrix.sh puts
the releases other than the venv's own under .triton-matrix/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from caovan_kernels.tensorcore75 import TESTED_TRITON
from tests.sm75.probe import ROOT, run_probe

MATRIX = ROOT / ".triton-matrix"


def _others() -> list[str]:
    import triton

    own = ".".join(triton.__version__.split(".")[:2])
    return [f"{a}.{b}" for a, b in TESTED_TRITON if f"{a}.{b}" != own]


@pytest.mark.parametrize("minor", _others())
def test_release_retargets_fp16_and_int8_and_keeps_the_rest(minor: str, tmp_path: Path) -> None:
    folder = MATRIX / minor
    assert (folder / ".installed").exists(), f"Triton {minor} missing: run scripts/install-triton-matrix.sh"
    out = run_probe("decisions", tmp_path, triton_path=folder)
    assert out["triton"].startswith(minor + ".")
    on = out["result"]["on"]
    assert {p: on[p].get("decision") for p in on} == {
        "fp16": "mma:fp16", "fp16_acc16": "mma:fp16", "fp16_loop": "mma:fp16", "int8": "mma:int8",
        "bf16": "kept:bf16_dot", "fp32_tf32": "kept:fp32_dot", "fp32_ieee": "kept:fp32_dot", "mixed": "kept:fp32_dot",
        "no_dot": "kept:no_dot",
    }
    assert all(on[p]["mma"] for p in ("fp16", "fp16_acc16", "fp16_loop", "int8"))
    off = out["result"]["off"]
    assert all(on[p]["ptx_body"] == off[p]["ptx_body"] for p in ("bf16", "fp32_tf32", "no_dot"))

