"""Chunked prefill (chunk_gated_delta_rule) against the float64 recurrent reference."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from gdn_cases import make_inputs, random_states

from caovan_kernels.gdn import chunk, chunk_gated_delta_rule
from caovan_kernels.gdn import reference as R
from caovan_kernels.gdn._common import compile_arch
from caovan_kernels.gdn.accuracy import CHUNK_TOL, rel_err
from caovan_kernels.gdn.plan import (
    FMA,
    MAX_WGMMA_WARPS2,
    MMA_SYNC_WARPS2,
    TENSOR_CORES,
    TURING_MMA,
    DotPlan,
    UnlaunchableBlocks,
    launchable,
    prefill_blocks,
)


def _poisoned(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


# (T, H, HV, K, V, dtype, gates, with_initial_state): T around the 64-token chunk, GVA ratios 1, 2, 3, 6,
# head dims 64, 100 (masked), 128 (and 32/16, fp32), gates from ~0 to strongly decaying.
CASES = [
    (1, 1, 1, 64, 64, torch.float16, "none", True),
    (63, 1, 2, 100, 64, torch.float16, "mild", False),
    (64, 1, 3, 128, 128, torch.bfloat16, "strong", True),
    (70, 1, 6, 64, 100, torch.float16, "mild", True),
    (97, 2, 4, 64, 64, torch.bfloat16, "none", False),
    (20, 1, 2, 32, 16, torch.float32, "mild", True),
]


@pytest.mark.parametrize("T,H,HV,K,V,dtype,gates,with_h0", CASES)
def test_chunk_matches_reference(gen, device, T, H, HV, K, V, dtype, gates, with_h0):
    x = make_inputs(gen, 1, T, H, HV, K, V, dtype, gates, device)
    h0 = random_states(gen, 1, HV, K, V, device) if with_h0 else None
    out = _poisoned((1, T, HV, V), dtype, device)
    o, ht = chunk_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, initial_state=h0, output_final_state=True, core_attn_out=out
    )
    ref_o, ref_h, _ = R.recurrent_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], K**-0.5, None if h0 is None else h0[0])
    assert o.data_ptr() == out.data_ptr() and o.dtype == dtype
    assert rel_err(o[0], ref_o) < CHUNK_TOL[dtype]
    assert ht.dtype == torch.float32 and ht.shape == (1, HV, K, V)
    assert rel_err(ht[0], ref_h) < CHUNK_TOL[dtype]


def test_chunk_batched_v_first_scale(gen, device):
    """B > 1 without cu_seqlens, a custom scale, the final state returned in the [V, K] layout."""
    B, T, H, HV, K, V = 2, 70, 1, 2, 64, 64
    x = make_inputs(gen, B, T, H, HV, K, V, torch.float16, "mild", device)
    h0 = random_states(gen, B, HV, K, V, device)
    o, ht = chunk_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, scale=0.3, initial_state=h0.transpose(-1, -2).contiguous(),
        output_final_state=True, state_v_first=True,
    )  # fmt: skip
    assert ht.shape == (B, HV, V, K)
    for b in range(B):
        ref_o, ref_h, _ = R.recurrent_gated_delta_rule(x.q[b], x.k[b], x.v[b], x.g[b], x.beta[b], 0.3, h0[b])
        assert rel_err(o[b], ref_o) < CHUNK_TOL[torch.float16]
        assert rel_err(ht[b].transpose(-1, -2), ref_h) < CHUNK_TOL[torch.float16]


@pytest.mark.parametrize("state_v_first", [False, True])
def test_chunk_varlen_state_cache(gen, device, state_v_first):
    """vLLM's prefill: packed sequences of 1, 2, 67 and 150 tokens, states gathered from / scattered to a cache.

    Sequence 0 reads its slot; 1 has no initial state (its poisoned slot must not be read, only overwritten);
    2 reads its slot; 3 sits on the null slot 0 (starts from zero, writes nothing). Unused slots stay untouched.
    """
    lens = [1, 2, 67, 150]
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    H, HV, K, V, dtype = 1, 2, 64, 64, torch.float16
    x = make_inputs(gen, 1, cu[-1], H, HV, K, V, dtype, "mild", device)
    slots = torch.tensor([5, 2, 7, 0], dtype=torch.int32, device=device)
    has_h0 = torch.tensor([True, False, True, True], device=device)
    states = random_states(gen, 9, HV, K, V, device)  # reference layout [slot, HV, K, V]
    states[2] = float("nan")
    cache = (states.transpose(-1, -2) if state_v_first else states).clone().contiguous()
    before = cache.clone()
    out = _poisoned((1, cu[-1], HV, V), dtype, device)
    o, ret = chunk_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, initial_state=cache, output_final_state=True,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device), state_v_first=state_v_first,
        ssm_state_indices=slots, has_initial_state=has_h0, core_attn_out=out,
    )  # fmt: skip
    assert ret is cache
    h0 = torch.stack([states[5], torch.zeros_like(states[0]), states[7], torch.zeros_like(states[0])])
    ref_o, ref_h = R.varlen_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], K**-0.5, cu, h0)
    assert rel_err(o[0], ref_o) < CHUNK_TOL[dtype]
    for n in range(4):
        lo, hi = cu[n], cu[n + 1]
        assert rel_err(o[0, lo:hi], ref_o[lo:hi]) < CHUNK_TOL[dtype], f"sequence {n}"
    got = cache.transpose(-1, -2) if state_v_first else cache
    for n, slot in enumerate([5, 2, 7]):
        assert rel_err(got[slot], ref_h[n]) < CHUNK_TOL[dtype], f"slot {slot}"
    untouched = [s for s in range(9) if s not in (5, 2, 7)]
    assert torch.equal(cache[untouched], before[untouched])


# The forms of the prefill, each run through the interpreter with fp16 operands: FMA-sized (sm_75, Triton's own
# lowering), Turing MMA (sm_75 with TensorCore75) and tensor cores (sm_80+): fp16 operands in every product.
PLANS = {form: DotPlan("ieee", native=True, form=form) for form in (FMA, TURING_MMA, TENSOR_CORES)}


@pytest.mark.parametrize("plan", PLANS)
def test_both_forms_at_the_qwen_layer_shape(gen, device, plan):
    """Qwen3.6-27B's GDN head shape (K = V = 128, 3 value heads per key head), fp16, vLLM's varlen state-cache call:
    outputs and final states within CHUNK_TOL of the float64 recurrence."""
    lens, H, HV, K, V, dtype = [150, 70], 1, 3, 128, 128, torch.float16
    cu = [0, lens[0], sum(lens)]
    x = make_inputs(gen, 1, cu[-1], H, HV, K, V, dtype, "mild", device)
    states = random_states(gen, 3, HV, K, V, device)
    cache = states.transpose(-1, -2).contiguous()  # vLLM's [slot, HV, V, K]
    out = _poisoned((1, cu[-1], HV, V), dtype, device)
    chunk_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, initial_state=cache, output_final_state=True,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device), state_v_first=True,
        ssm_state_indices=torch.tensor([1, 2], dtype=torch.int32, device=device), core_attn_out=out,
        plan=PLANS[plan],
    )  # fmt: skip
    ref_o, ref_h = R.varlen_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], K**-0.5, cu, states[1:])
    errors = [rel_err(out[0], ref_o)] + [rel_err(cache[n + 1].transpose(-1, -2), ref_h[n]) for n in range(2)]
    print(f"{plan}: output {errors[0]:.2e}, final states {errors[1]:.2e} {errors[2]:.2e} (bound {CHUNK_TOL[dtype]})")
    assert max(errors) < CHUNK_TOL[dtype]


@pytest.mark.parametrize(("prefetch", "parallel_output", "state_v_first", "K", "V"), [
    (True, False, False, 32, 32), (False, False, False, 32, 32),
    # a key dim that leaves the key block partly masked (block 64, rows 48-63), and K != V, in both layouts
    (True, False, False, 48, 32), (True, False, True, 48, 32),
    # the outputs from a third kernel, after each of the walks
    (False, True, False, 32, 32), (True, True, True, 32, 32), (True, True, False, 48, 32),
])
def test_kernel2_with_and_without_prefetch(gen, device, prefetch, parallel_output, state_v_first, K, V):
    """Kernel 2 with its state in registers, the next chunk's keys loaded ahead or not (PrefillBlocks.prefetch; the
    benchmark sweeps both), in both state layouts, with the outputs formed in the walk (at 8 warps) or by a kernel
    of their own (parallel_output, at 4 warps: wgmma on sm_90): an empty first sequence (whose ahead-load must stay in
    bounds), one shorter than a chunk, one ending mid-chunk; outputs and final states against the float64
    recurrence. Compiled for sm_90, where Triton 3.6 gets the prefetching loop wrong, the call is refused instead
    (plan.launchable)."""
    lens, H, HV, dtype = [0, 5, 130], 1, 2, torch.float16
    cu = [0, 0, 5, 135]
    x = make_inputs(gen, 1, cu[-1], H, HV, K, V, dtype, "mild", device)
    h0 = random_states(gen, len(lens), HV, K, V, device)
    blocks = dataclasses.replace(prefill_blocks(K, V, TURING_MMA), prefetch=prefetch,
                                 warps2=4 if parallel_output else 8, parallel_output=parallel_output)
    assert blocks.split_k == blocks.bk
    out = _poisoned((1, cu[-1], HV, V), dtype, device)
    call = functools.partial(
        chunk_gated_delta_rule, x.q, x.k, x.v, x.g, x.beta,
        initial_state=h0.transpose(-1, -2).contiguous() if state_v_first else h0, output_final_state=True,
        core_attn_out=out, cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device), plan=PLANS[TURING_MMA],
        blocks=blocks, state_v_first=state_v_first,
    )  # fmt: skip
    if not launchable(blocks, compile_arch(device.type, device.index)):
        with pytest.raises(UnlaunchableBlocks, match="no prefetch"):
            call()
        return
    _, ht = call()
    if state_v_first:
        ht = ht.transpose(-1, -2)
    ref_o, ref_h = R.varlen_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], K**-0.5, cu, h0)
    assert rel_err(out[0], ref_o) < CHUNK_TOL[dtype]
    assert torch.equal(ht[0], h0[0])  # no tokens: the state passes through
    for n in (1, 2):
        assert rel_err(ht[n], ref_h[n]) < CHUNK_TOL[dtype], f"sequence {n}"


@pytest.mark.parametrize(("plan", "state_v_first", "K", "V"), [
    (TENSOR_CORES, False, 32, 32), (TENSOR_CORES, True, 48, 32), (TURING_MMA, True, 32, 48),
])
def test_w_and_u_formed_ahead(gen, device, plan, state_v_first, K, V):
    """The WU_AHEAD form (PrefillBlocks.wu_ahead: w = Ti exp(G) k and u = Ti v from a kernel of their own, the walk
    over them, the outputs from kernel 3) in vLLM's state-cache call: an empty first sequence, one shorter than a
    chunk, one ending mid-chunk, one on the null slot 0 (read as zero, not written); key dims that leave the last
    column block partly masked, K != V both ways, both state layouts; outputs and final states against the float64
    recurrence."""
    H, HV, dtype = 1, 2, torch.float16  # sequences of 0, 5, 130 and 70 tokens
    cu = [0, 0, 5, 135, 205]
    x = make_inputs(gen, 1, cu[-1], H, HV, K, V, dtype, "mild", device)
    states = random_states(gen, 6, HV, K, V, device)  # reference layout [slot, HV, K, V]
    cache = (states.transpose(-1, -2) if state_v_first else states).clone().contiguous()
    before = cache.clone()
    slots = torch.tensor([4, 1, 3, 0], dtype=torch.int32, device=device)
    blocks = dataclasses.replace(prefill_blocks(K, V, plan), prefetch=False, parallel_output=True, wu_ahead=True)
    out = _poisoned((1, cu[-1], HV, V), dtype, device)
    chunk_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, initial_state=cache, output_final_state=True, core_attn_out=out,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device), state_v_first=state_v_first,
        ssm_state_indices=slots, plan=PLANS[plan], blocks=blocks,
    )  # fmt: skip
    h0 = torch.stack([states[4], states[1], states[3], torch.zeros_like(states[0])])
    ref_o, ref_h = R.varlen_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], K**-0.5, cu, h0)
    errors = [rel_err(out[0], ref_o)]
    got = cache.transpose(-1, -2) if state_v_first else cache
    assert torch.equal(got[4], states[4])  # no tokens: the state passes through
    errors += [rel_err(got[slot], ref_h[n]) for n, slot in ((1, 1), (2, 3))]
    print(f"{plan}: output {errors[0]:.2e}, final states {errors[1]:.2e} {errors[2]:.2e} (bound {CHUNK_TOL[dtype]})")
    assert max(errors) < CHUNK_TOL[dtype]
    assert torch.equal(cache[[0, 2, 5]], before[[0, 2, 5]])  # the null slot and the slots no sequence names


def test_kernel2_on_sm90_launches_only_what_triton_gets_right(gen, device, monkeypatch):
    """Compiled for sm_90, Triton 3.6's wgmma code for kernel 2 (4 warps and more) faults at 8 warps and is wrong
    with prefetch or with key rows that are not 16-byte aligned (plan.launchable); below 4 warps (mma.sync) all of
    those run right. Forms meant for other GPUs run there with those taken out of their defaults (Turing MMA:
    prefetch; FMA: 8 warps), a caller's explicit 8 warps, or prefetch on wgmma, is refused before any
    launch, and prefetch at 2 warps runs. The rule holds for both forms of kernel 2 (the default's walk over w and u
    takes unaligned key rows at 2 warps too). The compile target is presented as sm_90; the kernels run where the
    device is (the interpreter on a CPU; on an sm_90 GPU, for real)."""
    lens, H, HV, K, V, dtype = [70], 1, 2, 128, 128, torch.float16
    x = make_inputs(gen, 1, lens[0], H, HV, K, V, dtype, "mild", device)
    # plans resolve once per device: a fresh cache, so that the interpreter's plans are not found for sm_90
    monkeypatch.setattr("caovan_kernels.gdn.plan._plans", {})
    monkeypatch.setattr("caovan_kernels.gdn.plan.compile_arch", lambda device_type, index: 90)
    turing, fma = prefill_blocks(K, V, TURING_MMA), prefill_blocks(K, V, FMA)
    assert turing.prefetch and fma.warps2 == 8
    launched, walks = [], []

    class Recording:  # kernel 2 in either of its forms: the walk over Ti, k and v, or over w and u
        def __init__(self, name):
            self.name, self.kernel2 = name, getattr(chunk, name)

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launched.append((kwargs["num_warps"], kwargs.get("PREFETCH", False)))
                walks.append(self.name)
                return self.kernel2[grid](*args, **kwargs)
            return launch

    for name in ("_chunk_state_output_kernel", "_chunk_state_wu_kernel"):
        monkeypatch.setattr(chunk, name, Recording(name))
    ref_o, _, _ = R.recurrent_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], K**-0.5, None)
    for form in (TURING_MMA, FMA):
        o, _ = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, plan=PLANS[form])
        assert rel_err(o[0], ref_o) < CHUNK_TOL[dtype], form
    assert launched == [(MAX_WGMMA_WARPS2, False)] * 2

    default = prefill_blocks(K, V, TENSOR_CORES)
    walk = dataclasses.replace(default, wu_ahead=False)  # the form that can prefetch
    for refused in (dataclasses.replace(default, warps2=8), dataclasses.replace(walk, prefetch=True)):
        with pytest.raises(UnlaunchableBlocks, match="at most 4 warps, no prefetch"):
            chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, plan=PLANS[TENSOR_CORES], blocks=refused)
        assert launchable(refused, 75) and launchable(refused, None) and not launchable(refused, 90)
    assert len(launched) == 2
    mma_sync = dataclasses.replace(walk, warps2=MMA_SYNC_WARPS2, prefetch=True)
    o, _ = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, plan=PLANS[TENSOR_CORES], blocks=mma_sync)
    assert launched[2:] == [(MMA_SYNC_WARPS2, True)] and rel_err(o[0], ref_o) < CHUNK_TOL[dtype]
    del launched[2:]

    # head dim 100 in fp16: key rows of 200 bytes, which Triton cannot copy asynchronously; mma.sync takes them
    x = make_inputs(gen, 1, 63, 1, 2, 100, 64, dtype, "mild", device)
    o, _ = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, plan=PLANS[TENSOR_CORES])
    ref_o, _, _ = R.recurrent_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], 100**-0.5, None)
    assert launched[2:] == [(MMA_SYNC_WARPS2, False)] and rel_err(o[0], ref_o) < CHUNK_TOL[dtype]
    # at 2 warps the default's walk over w and u is slow (plan.blocks_for_target): the fallback walks over Ti
    assert prefill_blocks(100, 64, TENSOR_CORES).wu_ahead and walks[-1] == "_chunk_state_output_kernel"
    with pytest.raises(UnlaunchableBlocks, match="key rows of 200 bytes"):
        chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, plan=PLANS[TENSOR_CORES],
                               blocks=prefill_blocks(100, 64, TENSOR_CORES))
    assert len(launched) == 3


def test_chunk_in_kernel_norm_and_gates(gen, device):
    """use_qk_l2norm_in_kernel, use_gate_in_kernel (A_log, dt_bias) and use_beta_sigmoid_in_kernel."""
    T, H, HV, K, V, dtype = 80, 1, 2, 64, 64, torch.bfloat16
    x = make_inputs(gen, 1, T, H, HV, K, V, dtype, "none", device)
    q = (3.0 * x.q.float()).to(dtype)  # not unit norm: the kernel normalises
    k = (2.0 * x.k.float()).to(dtype)
    a = torch.randn(1, T, HV, generator=gen).to(device, dtype)
    b = torch.randn(1, T, HV, generator=gen).to(device, dtype)
    A_log = torch.randn(HV, generator=gen).to(device) - 2.0
    dt_bias = torch.randn(HV, generator=gen).to(device)
    o, _ = chunk_gated_delta_rule(
        q, k, x.v, a, b, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=True,
    )  # fmt: skip
    g = R.gate_from_raw(A_log, a[0], dt_bias)
    ref_o, _, _ = R.recurrent_gated_delta_rule(q[0], k[0], x.v[0], g, torch.sigmoid(b[0].double()), K**-0.5, use_qk_l2norm=True)
    assert rel_err(o[0], ref_o) < CHUNK_TOL[dtype]


def test_chunked_form_equals_recurrence(gen):
    """The WY chunked form the kernels implement (plain torch, float64) equals the token-by-token recurrence."""
    x = make_inputs(gen, 1, 150, 2, 4, 32, 24, torch.float64, "strong", torch.device("cpu"))
    h0 = random_states(gen, 1, 4, 32, 24, torch.device("cpu")).double()
    o, h = R.chunked_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], 0.2, h0[0])
    ref_o, ref_h, _ = R.recurrent_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], 0.2, h0[0])
    assert rel_err(o, ref_o) < 1e-10 and rel_err(h, ref_h) < 1e-10  # float64 throughout


def test_chunk_given_chunk_indices(gen, device):
    """fla-format chunk_indices ([sequence, chunk in sequence] rows, 64-token chunks) are used as given."""
    cu = [0, 10, 80]
    x = make_inputs(gen, 1, 80, 1, 1, 64, 64, torch.float16, "mild", device)
    table = torch.tensor([[0, 0], [1, 0], [1, 1]], dtype=torch.int64, device=device)
    o, ht = chunk_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, output_final_state=True,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device), chunk_indices=table,
    )  # fmt: skip
    ref_o, ref_h = R.varlen_gated_delta_rule(x.q[0], x.k[0], x.v[0], x.g[0], x.beta[0], 64**-0.5, cu)
    assert rel_err(o[0], ref_o) < CHUNK_TOL[torch.float16]
    assert rel_err(ht, ref_h) < CHUNK_TOL[torch.float16]
