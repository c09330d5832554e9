"""The harness that calls vLLM's own Triton kernels for the GPU parity checks and benchmarks
(lab/vllm_kernels.py), checked here through Triton's interpreter at small shapes: its inputs, its
calls in vLLM's conventions (paged KV layout, block tables, slot caches) and its references agree. vLLM's chunked
GDN prefill cannot run here: its kernels call tl.exp through a module alias, which the interpreter does not patch;
the GPU parity script holds it to the fp64 oracle instead."""

from __future__ import annotations

import pytest
import torch
from triton.runtime import driver

from caovan_kernels.turing.compile_only import _driver_class
from caovan_kernels.turing.device_view import RTX_2080_TI
from lab import vllm_kernels

# Through the interpreter only (the driver is swapped below): on a GPU, scripts/verify_tensorcore75_gpu.py runs these
# kernels and holds them to the same references.
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the harness through Triton's interpreter; "
                                "on a GPU run scripts/verify_tensorcore75_gpu.py")
if not torch.cuda.is_available():
    vllm_kernels.use_real_triton()  # vLLM's CPU build hides Triton; the interpreter runs its kernels here
    # imported before the driver below exists, so fla sizes itself for no GPU, as it would in a CPU engine
    vllm_kernels.gdn_ops()


@pytest.fixture(autouse=True)
def first_config_autotuning():
    """fla's autotuners time every configuration through Triton's driver, which a CPU lacks: a driver whose
    benchmark ranks configurations in the order given makes them take the first one (run by the interpreter)."""
    def ranked(kernel_call, quantiles=None, **kwargs):
        ranked.calls += 1
        return [float(ranked.calls)] * len(quantiles) if quantiles else float(ranked.calls)

    ranked.calls = 0
    interpreter_driver = _driver_class()(RTX_2080_TI)
    interpreter_driver.get_benchmarker = lambda: ranked
    previous = driver._active
    driver.set_active(interpreter_driver)
    yield
    driver.set_active(previous)


@pytest.mark.parametrize("case", [
    vllm_kernels.AttentionCase("prefill", (21, 11), (0, 40), head_dim=32, heads_q=6, heads_kv=1, block_size=16),
    vllm_kernels.AttentionCase("decode", (1, 1, 1), (50, 3, 17), head_dim=32, heads_q=6, heads_kv=1, block_size=32),
    vllm_kernels.AttentionCase("verify", (4, 4), (9, 30), head_dim=32, heads_q=6, heads_kv=1, block_size=16),
], ids=lambda c: c.name)
def test_unified_attention_matches_the_reference(case, device, gen) -> None:
    inputs = vllm_kernels.attention_inputs(case, device, gen)
    out = vllm_kernels.run_unified_attention(inputs)
    ref = vllm_kernels.attention_reference(inputs)
    assert not torch.isnan(out).any(), "rows left unwritten (the output starts as NaN)"
    assert (out.float() - ref).abs().max().item() < 4e-3  # fp16 outputs of O(1): a few ulps


def test_gdn_decode_updates_the_slots_in_place(device, gen) -> None:
    d = vllm_kernels.gdn_decode_inputs(2, 4, device, gen, H=2, HV=4, K=32, V=32)
    before = d.cache.clone()
    out, cache = vllm_kernels.run_gdn_decode(d)
    assert out.shape == d.v.shape and torch.isfinite(out).all()
    written = d.slots.flatten().long()
    assert not torch.equal(cache[written], before[written])
    assert torch.equal(cache[0], before[0]), "the null slot 0 must stay untouched"
