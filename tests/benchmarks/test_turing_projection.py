"""The 2080 Ti projection's arithmetic: the bytes of a decode step and the flops of a prefill follow from the shapes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("turing_projection", ROOT / "benchmarks" / "turing_projection.py")
projection = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = projection  # its dataclass looks its module up there
_spec.loader.exec_module(projection)


def test_a_decode_step_reads_the_lm_head_once_per_pass_and_the_awq_weights_once():
    m, hw = projection._model(projection.REAL_CONFIG), projection.Turing()
    step = projection.decode_step(m, hw, tp=2, spec=3, context=4096)
    assert step["lm_head x (1+S) (GB)"] == 124_160 * 5120 * 2 * 4 / 1e9  # vocab/2 x hidden, fp16, 4 passes
    # the target's AWQ linears: 64 of the 65 decoder layers' (the 65th is the MTP layer, read once per draft)
    assert 6.3 < step["target linears (AWQ) (GB)"] < 6.5
    assert abs(step["drafter layer x S (GB)"] * 64 / 3 - step["target linears (AWQ) (GB)"]) < 1e-9
    parts = sum(v for k, v in step.items() if k.endswith("(GB)") and k != "bytes (GB)")
    assert abs(step["bytes (GB)"] - parts) < 1e-9


def test_prefill_grows_faster_than_linearly_and_tensor_cores_only_shorten_attention():
    m, hw = projection._model(projection.REAL_CONFIG), projection.Turing()
    fma = [projection.prefill(m, hw, 2, n, hw.fma_fp32 * hw.attention_fma_efficiency) for n in (4096, 32768)]
    mma = [projection.prefill(m, hw, 2, n, hw.mma_fp16 * hw.attention_mma_efficiency) for n in (4096, 32768)]
    assert fma[1]["attention (s)"] == 64 * fma[0]["attention (s)"]  # causal attention: quadratic in the prompt
    assert fma[1]["GEMMs (s)"] == 8 * fma[0]["GEMMs (s)"]
    for f, t in zip(fma, mma):
        assert t["attention (s)"] < f["attention (s)"]
        assert (t["GEMMs (s)"], t["GDN (s)"], t["all-reduces (s)"]) == (f["GEMMs (s)"], f["GDN (s)"],
                                                                        f["all-reduces (s)"])
