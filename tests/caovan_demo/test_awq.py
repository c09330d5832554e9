"""AWQ int4 (AutoAWQ GEMM format): our packer against the plain reference, hand-made words and vLLM's own code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from caovan_demo.awq import (
    AwqFormatError,
    QuantizedLinear,
    dequantize,
    quantize_linear,
    quantize_tensors,
)
from caovan_demo.awq.checkpoint import dequantize_tensors, quantization_config
from caovan_demo.awq.format import GROUP_SIZE
from caovan_demo.awq.pack import pack_int4
from caovan_demo.awq.reference import unpack_int4

REPO = Path(__file__).resolve().parents[2]


def _weight(gen: torch.Generator, out_features: int, in_features: int) -> torch.Tensor:
    # Groups with different ranges and offsets, so scales and zeros vary across groups and columns.
    w = torch.randn(out_features, in_features, generator=gen) * 0.05
    return w * (1 + 3 * torch.rand(1, in_features // GROUP_SIZE, generator=gen).repeat_interleave(GROUP_SIZE, 1)) \
        + 0.02 * torch.randn(out_features, 1, generator=gen)


def test_words_hold_features_in_awq_order():
    """Word j of a row packs features 8j..8j+7 with feature order 0 2 4 6 1 3 5 7 from the lowest nibble up."""
    values = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 15, 0, 0, 0, 0, 0, 0, 9]])
    # Nibbles (low to high) of word 0: features 0,2,4,6,1,3,5,7 = 1,3,5,7,2,4,6,8; of word 1: 15,0,0,0,0,0,0,9.
    want = [0x86427531, 0x9000000F]
    got = pack_int4(values)
    assert got.dtype == torch.int32
    assert [w & 0xFFFFFFFF for w in got[0].tolist()] == want
    assert got[0, 0].item() < 0  # a set top bit reads negative, as int32 checkpoints store it


def test_round_trip_is_within_half_a_step(gen):
    w = _weight(gen, 384, 3 * GROUP_SIZE)
    layer = quantize_linear(w)
    layer.check("test")
    back = dequantize(layer)
    step = layer.scales.float().repeat_interleave(GROUP_SIZE, 0).t()  # per element, [N, K]
    err = (back - w).abs()
    # Round to nearest: half a step, plus float16 rounding of the scale over at most 15 steps.
    assert (err <= step * (0.5 + 15 * 2**-10) + 1e-7).all(), f"max error {(err / step).max():.3f} steps"
    rel = (back - w).norm() / w.norm()
    print(f"AWQ round trip: max |error| {err.max():.4g}, relative Frobenius error {rel:.4f}")
    # Rounding errors spread evenly over a step: their RMS is step / sqrt(12) (10% margin for clamped ends).
    assert err.pow(2).mean().sqrt() <= 1.1 * (step.pow(2).mean() / 12).sqrt()


def test_zeros_and_scales_reproduce_min_and_max(gen):
    w = _weight(gen, 64, 2 * GROUP_SIZE)
    layer = quantize_linear(w)
    zeros = unpack_int4(layer.qzeros)  # [G, N]
    groups = w.t().reshape(2, GROUP_SIZE, 64)
    s = layer.scales.float()
    # The group minimum maps close to integer 0 - z, the maximum to 15 - z (each within one step).
    assert ((groups.amin(1) / s + zeros).abs() <= 1).all()
    assert ((groups.amax(1) / s + zeros - 15).abs() <= 1).all()


def test_integers_round_trip_through_the_reference_unpacker(gen):
    values = torch.randint(0, 16, (32, 8 * 12), generator=gen)
    assert torch.equal(unpack_int4(pack_int4(values)), values)


def test_packing_matches_vllm_awq_pack(gen):
    """vLLM's own AWQ packer (quant_utils.awq_pack, what its AWQ kernel tests build checkpoints with)."""
    from vllm.model_executor.layers.quantization.utils.quant_utils import awq_pack

    values = torch.randint(0, 16, (2 * GROUP_SIZE, 96), generator=gen)
    assert torch.equal(pack_int4(values), awq_pack(values, 4, 2 * GROUP_SIZE, 96))


def test_vllm_loader_reads_what_the_reference_reads(gen, tmp_path):
    """vLLM's AWQ load-time conversion, run in a child process, recovers the same integers and weights."""
    layer = quantize_linear(_weight(gen, 256, 3 * GROUP_SIZE))
    src, dst = tmp_path / "layer.safetensors", tmp_path / "vllm.safetensors"
    save_file({"qweight": layer.qweight, "qzeros": layer.qzeros, "scales": layer.scales,
               "group_size": torch.tensor(GROUP_SIZE)}, str(src))
    # No plugins in the child: only vLLM's own code reads the layer.
    proc = subprocess.run([sys.executable, "-m", "tests.support.vllm_awq", str(src), str(dst)], cwd=REPO,
                          env={**os.environ, "VLLM_PLUGINS": ""}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = load_file(str(dst))
    assert torch.equal(seen["q"].long(), unpack_int4(layer.qweight))
    assert torch.equal(seen["zeros"].long(), unpack_int4(layer.qzeros))
    assert torch.equal(seen["weight"], dequantize(layer))


def test_checkpoint_conversion_skips_modules_not_to_convert(gen):
    tensors = {"a.in_proj_a.weight": torch.randn(6, 128, generator=gen), "a.q_proj.weight": _weight(gen, 64, 128),
               "a.q_proj.bias": torch.randn(64, generator=gen), "norm.weight": torch.randn(128, generator=gen)}
    out = quantize_tensors(tensors, ["a.in_proj_a", "a.q_proj"], ["in_proj_a"])
    assert set(out) == {"a.in_proj_a.weight", "a.q_proj.qweight", "a.q_proj.qzeros", "a.q_proj.scales",
                        "a.q_proj.bias", "norm.weight"}
    back = dequantize_tensors(out, GROUP_SIZE, torch.float32)
    assert set(back) == set(tensors)
    assert torch.equal(back["a.in_proj_a.weight"], tensors["a.in_proj_a.weight"])
    assert torch.equal(back["a.q_proj.weight"], dequantize(QuantizedLinear(out["a.q_proj.qweight"],
                                                                            out["a.q_proj.qzeros"], out["a.q_proj.scales"])))
    assert quantization_config(["in_proj_a"]) == {"quant_method": "awq", "bits": 4, "group_size": 128,
                                                  "zero_point": True, "version": "gemm",
                                                  "modules_to_not_convert": ["in_proj_a"]}


@pytest.mark.parametrize("shape, why", [((6, 128), "output features in multiples of 8"),
                                        ((64, 100), "whole groups of 128"), ((4, 4, 128), "2-D linear weights")])
def test_layers_that_do_not_fit_the_format_are_refused_by_name(shape, why):
    with pytest.raises(AwqFormatError, match=why) as exc:
        quantize_linear(torch.zeros(shape), where="model.layers.0.mlp.up_proj")
    assert "model.layers.0.mlp.up_proj" in str(exc.value)


def test_inconsistent_tensors_are_refused(gen):
    layer = quantize_linear(_weight(gen, 64, GROUP_SIZE))
    bad = QuantizedLinear(layer.qweight, layer.qzeros, layer.scales.float())
    with pytest.raises(AwqFormatError, match=r"scales is torch.float32.*needs torch.float16"):
        dequantize(bad, where="lin")
    with pytest.raises(AwqFormatError, match="a qweight but no lin.qzeros"):
        dequantize_tensors({"lin.qweight": layer.qweight, "lin.scales": layer.scales}, GROUP_SIZE, torch.float32)
