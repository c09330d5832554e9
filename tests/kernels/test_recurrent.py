"""Decode / MTP spec verify (fused_sigmoid_gating_delta_rule_update, fused_recurrent_gated_delta_rule) and the
split-QK step against the float64 reference."""

from __future__ import annotations

import pytest
import torch
from gdn_cases import make_inputs, random_states

from caovan_kernels.gdn import (
    fused_recurrent_gated_delta_rule,
    fused_sigmoid_gating_delta_rule_update,
    l2norm_scale_qk,
    recurrent,
)
from caovan_kernels.gdn import reference as R
from caovan_kernels.gdn._common import interpreting
from caovan_kernels.gdn.accuracy import DECODE_OUT_TOL, DECODE_STATE_TOL, rel_err


@pytest.fixture(params=["device-blocks", "gpu-blocks"])
def launch(request, monkeypatch):
    """The interpreter runs one program per head's value row (recurrent.decode_blocks); the value blocks a GPU runs
    are checked here in the interpreter too, so CI covers their masks and block offsets."""
    if request.param == "gpu-blocks":
        if not interpreting():
            pytest.skip("on a GPU this device's launch is a GPU's")
        monkeypatch.setattr(recurrent, "interpreting", lambda: False)
    recurrent._launch_cache.clear()
    yield
    recurrent._launch_cache.clear()


@pytest.mark.parametrize(
    "B,T,H,HV,K,V,dtype,gates,with_h0,v_first",
    [
        (2, 3, 1, 3, 100, 64, torch.float16, "mild", True, False),
        (1, 5, 2, 4, 64, 128, torch.bfloat16, "strong", False, True),
        (3, 1, 1, 1, 128, 64, torch.float16, "none", True, True),
        (1, 2, 1, 1, 256, 32, torch.float16, "mild", True, False),  # K=256: two warps on a GPU
    ],
)
def test_fused_recurrent_matches_reference(gen, device, launch, B, T, H, HV, K, V, dtype, gates, with_h0, v_first):
    x = make_inputs(gen, B, T, H, HV, K, V, dtype, gates, device)
    h0 = random_states(gen, B, HV, K, V, device) if with_h0 else None
    h0_arg = None if h0 is None else (h0.transpose(-1, -2).contiguous() if v_first else h0)
    o, ht = fused_recurrent_gated_delta_rule(
        x.q, x.k, x.v, x.g, beta=x.beta, initial_state=h0_arg, output_final_state=True, state_v_first=v_first
    )
    for b in range(B):
        ref_o, ref_h, _ = R.recurrent_gated_delta_rule(x.q[b], x.k[b], x.v[b], x.g[b], x.beta[b], K**-0.5, None if h0 is None else h0[b])
        assert rel_err(o[b], ref_o) < DECODE_OUT_TOL[dtype]
        got_h = ht[b].transpose(-1, -2) if v_first else ht[b]
        assert rel_err(got_h, ref_h) < DECODE_STATE_TOL


def _vllm_call(x, a, b, A_log, dt_bias, cache, cu, slots, accepted, v_first, out):
    return fused_sigmoid_gating_delta_rule_update(
        A_log, a, b, dt_bias, x.q, x.k, x.v, initial_state=cache, inplace_final_state=True,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=cache.device), ssm_state_indices=slots,
        num_accepted_tokens=accepted, use_qk_l2norm_in_kernel=True, state_v_first=v_first, out=out,
    )  # fmt: skip


def _raw_gates(gen, T, HV, dtype, device):
    a = torch.randn(T, HV, generator=gen).to(device, dtype)
    b = torch.randn(T, HV, generator=gen).to(device, dtype)
    A_log = (torch.rand(HV, generator=gen) * 3 - 2).to(device)  # decays from ~0 to strong
    dt_bias = torch.randn(HV, generator=gen).to(device)
    return a, b, A_log, dt_bias


@pytest.mark.parametrize("v_first", [True, False])
@pytest.mark.parametrize("spec", [False, True])
def test_vllm_decode_and_spec_verify(gen, device, launch, spec, v_first):
    """Decode (indices [N]) and MTP=3 verify (indices [N, 4], 1..4 accepted tokens = 0..3 accepted drafts).

    Rows: ordinary, a start on the null slot 0 (skipped), padding -1 (skipped), and in spec mode null/padding
    targets for some draft positions (never written) and a row with fewer tokens than 1 + S.
    """
    H, HV, K, V, dtype = 1, 3, 64, 64, torch.float16
    n_slots = 24
    if spec:
        lens = [4, 4, 4, 4, 2, 4]
        slots = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 0, 10, -1], [0, 11, 12, 13], [14, 15, -1, -1], [-1, -1, -1, -1]]
        accepted = [1, 4, 2, 1, 2, 1]
    else:
        lens = [1, 1, 1, 1]
        slots = [3, 0, 7, -1]
        accepted = None
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    x = make_inputs(gen, 1, cu[-1], H, HV, K, V, dtype, "none", device)
    q = (2.0 * x.q.float()).to(dtype)  # the kernel normalises q and k itself
    x.q = q
    a, b, A_log, dt_bias = _raw_gates(gen, cu[-1], HV, dtype, device)
    states = random_states(gen, n_slots, HV, K, V, device)
    cache = (states.transpose(-1, -2) if v_first else states).clone().contiguous()
    before = cache.clone()
    slots_t = torch.tensor(slots, dtype=torch.int32, device=device)
    accepted_t = None if accepted is None else torch.tensor(accepted, dtype=torch.int32, device=device)
    out = torch.full((1, cu[-1], HV, V), float("nan"), dtype=dtype, device=device)
    o, ret = _vllm_call(x, a, b, A_log, dt_bias, cache, cu, slots_t, accepted_t, v_first, out)
    assert ret is cache and o.data_ptr() == out.data_ptr()

    ref_o, ref_cache, ran = R.sigmoid_gating_update(
        A_log, a, b, dt_bias, x.q[0], x.k[0], x.v[0], K**-0.5, before, cu, slots_t, accepted_t, v_first
    )
    assert any(ran) and not all(ran)
    rows = torch.cat([torch.arange(cu[n], cu[n + 1]) for n in range(len(lens)) if ran[n]])
    assert rel_err(o[0, rows], ref_o[rows]) < DECODE_OUT_TOL[dtype]
    skipped = [t for n in range(len(lens)) if not ran[n] for t in range(cu[n], cu[n + 1])]
    assert torch.equal(o[0, skipped], torch.zeros_like(o[0, skipped]))
    written = sorted({s for s in range(n_slots) if not torch.equal(ref_cache[s], before[s])})
    assert written, "the reference wrote no slot: the case tests nothing"
    assert rel_err(cache[written], ref_cache[written]) < DECODE_STATE_TOL
    kept = [s for s in range(n_slots) if s not in written]
    assert torch.equal(cache[kept], before[kept]), "a slot the reference leaves alone was written"


def test_vllm_per_token_states(gen, device, launch):
    """inplace_final_state=False: the state after every token comes back as [T, HV, V, K]; the cache is not written."""
    H, HV, K, V, dtype = 1, 2, 64, 64, torch.bfloat16
    cu = [0, 3, 5]
    x = make_inputs(gen, 1, 5, H, HV, K, V, dtype, "mild", device)
    a, b, A_log, dt_bias = _raw_gates(gen, 5, HV, dtype, device)
    cache = random_states(gen, 4, HV, V, K, device)  # [slot, HV, V, K]
    before = cache.clone()
    slots = torch.tensor([2, 3], dtype=torch.int32, device=device)
    o, per_token = fused_sigmoid_gating_delta_rule_update(
        A_log, a, b, dt_bias, x.q, x.k, x.v, initial_state=cache, inplace_final_state=False,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device), ssm_state_indices=slots,
    )  # fmt: skip
    assert torch.equal(cache, before)
    g = R.gate_from_raw(A_log, a, dt_bias)
    beta = torch.sigmoid(b.double())
    for n, slot in enumerate([2, 3]):
        lo, hi = cu[n], cu[n + 1]
        ref_o, _, ref_states = R.recurrent_gated_delta_rule(
            x.q[0, lo:hi], x.k[0, lo:hi], x.v[0, lo:hi], g[lo:hi], beta[lo:hi], K**-0.5, cache[slot].transpose(-1, -2)
        )
        assert rel_err(o[0, lo:hi], ref_o) < DECODE_OUT_TOL[dtype]
        assert rel_err(per_token[lo:hi].transpose(-1, -2), ref_states) < DECODE_STATE_TOL


def test_split_qk_step(gen, device):
    q = torch.randn(7, 3, 100, generator=gen).to(device, torch.float16)
    k = torch.randn(7, 3, 100, generator=gen).to(device, torch.float16)
    qn, kn = l2norm_scale_qk(q, k, 0.25)
    assert rel_err(qn, R.l2_normalize(q) * 0.25) < 1e-3  # fp16 output rounding
    assert rel_err(kn, R.l2_normalize(k)) < 1e-3
