"""The same checks at Qwen3.6-27B's GDN shapes (K = V = 128; TP1: 16 key / 48 value heads, TP2: 8 / 24), GPU only."""

from __future__ import annotations

import pytest
import torch
from gdn_cases import make_inputs, random_states

from caovan_kernels.gdn import (
    chunk_gated_delta_rule,
    fused_sigmoid_gating_delta_rule_update,
)
from caovan_kernels.gdn import reference as R
from caovan_kernels.gdn.accuracy import (
    CHUNK_TOL,
    DECODE_OUT_TOL,
    DECODE_STATE_TOL,
    rel_err,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
TP = {"tp1": (16, 48), "tp2": (8, 24)}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tp", ["tp1", "tp2"])
def test_qwen_prefill_varlen_cache(gen, device, tp, dtype):
    H, HV = TP[tp]
    K = V = 128
    cu = [0, 1, 700, 2800]  # one token, a mid prompt, a long prompt
    x = make_inputs(gen, 1, cu[-1], H, HV, K, V, dtype, "mild", device)
    states = random_states(gen, 6, HV, K, V, device)
    cache = states.transpose(-1, -2).contiguous()  # vLLM 0.33's [slot, HV, V, K]
    slots = torch.tensor([4, 1, 5], dtype=torch.int32, device=device)
    has_h0 = torch.tensor([True, False, True], device=device)
    out = torch.full((1, cu[-1], HV, V), float("nan"), dtype=dtype, device=device)
    chunk_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, initial_state=cache, output_final_state=True, state_v_first=True,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device), ssm_state_indices=slots,
        has_initial_state=has_h0, core_attn_out=out,
    )  # fmt: skip
    h0 = torch.stack([states[4], torch.zeros_like(states[1]), states[5]])
    ref_o, ref_h = R.varlen_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], K**-0.5, cu, h0)
    assert rel_err(out[0], ref_o) < CHUNK_TOL[dtype]
    for n, slot in enumerate([4, 1, 5]):
        assert rel_err(cache[slot].transpose(-1, -2), ref_h[n]) < CHUNK_TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tp", ["tp1", "tp2"])
def test_qwen_spec_verify(gen, device, tp, dtype):
    """MTP=3 verify for 8 sequences with 1..4 accepted tokens, one padding row."""
    H, HV = TP[tp]
    K = V = 128
    B, S = 8, 3
    cu = list(range(0, B * (S + 1) + 1, S + 1))
    x = make_inputs(gen, 1, cu[-1], H, HV, K, V, dtype, "none", device)
    a = torch.randn(cu[-1], HV, generator=gen).to(device, dtype)
    b = torch.randn(cu[-1], HV, generator=gen).to(device, dtype)
    A_log = (torch.rand(HV, generator=gen) * 3 - 2).to(device)
    dt_bias = torch.randn(HV, generator=gen).to(device)
    n_slots = 1 + B * (S + 1)
    slots = torch.arange(1, n_slots, dtype=torch.int32, device=device).view(B, S + 1)
    slots[B - 1] = -1
    accepted = torch.randint(1, S + 2, (B,), generator=gen, dtype=torch.int32).to(device)
    cache = random_states(gen, n_slots, HV, V, K, device)
    before = cache.clone()
    out = torch.full((1, cu[-1], HV, V), float("nan"), dtype=dtype, device=device)
    fused_sigmoid_gating_delta_rule_update(
        A_log, a, b, dt_bias, x.q, x.k, x.v, initial_state=cache, cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device),
        ssm_state_indices=slots, num_accepted_tokens=accepted, use_qk_l2norm_in_kernel=True, out=out,
    )  # fmt: skip
    ref_o, ref_cache, ran = R.sigmoid_gating_update(
        A_log, a, b, dt_bias, x.q[0], x.k[0], x.v[0], K**-0.5, before, cu, slots, accepted, True
    )
    rows = slice(0, cu[B - 1])
    assert ran == [True] * (B - 1) + [False]
    assert rel_err(out[0, rows], ref_o[rows]) < DECODE_OUT_TOL[dtype]
    assert rel_err(cache[1:], ref_cache[1:]) < DECODE_STATE_TOL


def test_repeat_decode_takes_cached_launch(gen, device):
    """The second identical call goes through the cached compiled launcher: it must give the same result."""
    H, HV = TP["tp2"]
    K = V = 128
    B = 2
    x = make_inputs(gen, 1, B, H, HV, K, V, torch.float16, "none", device)
    a = torch.randn(B, HV, generator=gen).to(device, torch.float16)
    b = torch.randn(B, HV, generator=gen).to(device, torch.float16)
    A_log = (torch.rand(HV, generator=gen) - 1).to(device)
    dt_bias = torch.randn(HV, generator=gen).to(device)
    slots = torch.tensor([3, 1], dtype=torch.int32, device=device)
    cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=device)
    start = random_states(gen, 4, HV, V, K, device)
    results = []
    for _ in range(3):
        cache = start.clone()
        out = torch.full((1, B, HV, V), float("nan"), dtype=torch.float16, device=device)
        fused_sigmoid_gating_delta_rule_update(
            A_log, a, b, dt_bias, x.q, x.k, x.v, initial_state=cache, cu_seqlens=cu, ssm_state_indices=slots,
            use_qk_l2norm_in_kernel=True, out=out,
        )  # fmt: skip
        results.append((out, cache))
    ref_o, ref_cache, _ = R.sigmoid_gating_update(A_log, a, b, dt_bias, x.q[0], x.k[0], x.v[0], K**-0.5, start, [0, 1, 2], slots, None, True)
    for out, cache in results:
        assert rel_err(out[0], ref_o) < DECODE_OUT_TOL[torch.float16]
        assert rel_err(cache, ref_cache) < DECODE_STATE_TOL
    assert torch.equal(results[0][0], results[2][0]) and torch.equal(results[0][1], results[2][1])
