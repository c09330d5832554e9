"""Token-by-token Gated DeltaNet: decode and MTP spec-verify in one fused launch.

One program owns one (sequence, value head, value block) and keeps its BK x BV slice of the fp32 state in
registers across the sequence's tokens: q/k normalisation, the gates from the raw projections
(g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)), the state update and the output all happen here,
so a decode step of a GDN layer is a single kernel launch. Decode is state-bandwidth bound: the state slice is
read once and written once per token that must be kept.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from caovan_kernels.gdn._common import (
    check_heads,
    head_block,
    interpreting,
    token_major,
)
from caovan_kernels.gdn._launcher import CachedLaunch

# Where the state comes from (READ_*) and goes to (WRITE_*); runtime ints, one compiled kernel serves all.
READ_ZERO, READ_PER_SEQUENCE, READ_SLOT, READ_SPEC_SLOT = 0, 1, 2, 3
WRITE_NONE, WRITE_PER_SEQUENCE, WRITE_SLOT, WRITE_SPEC_SLOTS, WRITE_PER_TOKEN = 0, 1, 2, 3, 4
EPS = tl.constexpr(1e-6)


@triton.jit
def _recurrent_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, A_log_ptr, dt_bias_ptr, o_ptr,
    h0_ptr, ht_ptr, slot_ptr, accepted_ptr, cu_ptr,
    stride_q, stride_k, stride_v, stride_h0, stride_ht, stride_slot_row,
    scale, softplus_beta, softplus_threshold, beta_scale,
    seq_len, heads_k, heads_v, dim_k, dim_v,
    varlen, raw_gate, raw_beta, qk_l2norm, read_mode, write_mode,
    BK: tl.constexpr, BV: tl.constexpr, V_FIRST: tl.constexpr,
):  # fmt: skip
    iv, pid = tl.program_id(0), tl.program_id(1)
    seq, hv = pid // heads_v, pid % heads_v
    h = hv // (heads_v // heads_k)
    if varlen:
        bos = tl.load(cu_ptr + seq).to(tl.int64)
        eos = tl.load(cu_ptr + seq + 1).to(tl.int64)
    else:
        bos = seq.to(tl.int64) * seq_len
        eos = bos + seq_len
    rk = tl.arange(0, BK)
    rv = iv * BV + tl.arange(0, BV)
    km, vm = rk < dim_k, rv < dim_v
    if V_FIRST:
        state_off = hv * dim_k * dim_v + rv[None, :] * dim_k + rk[:, None]
    else:
        state_off = hv * dim_k * dim_v + rk[:, None] * dim_v + rv[None, :]
    state_mask = km[:, None] & vm[None, :]
    slot_row = slot_ptr + seq * stride_slot_row

    h0_row = seq.to(tl.int64) * stride_h0
    if read_mode >= 2:
        if read_mode == 3:  # start from the state after the last accepted token
            slot = tl.load(slot_row + tl.load(accepted_ptr + seq).to(tl.int64) - 1).to(tl.int64)
        else:
            slot = tl.load(slot_row).to(tl.int64)
        if slot <= 0:  # vLLM's null block or padding: nothing to read or keep; give zeros, not garbage
            for t in range(bos, eos):
                tl.store(o_ptr + (t * heads_v + hv) * dim_v + rv, tl.zeros([BV], o_ptr.dtype.element_ty), mask=vm)
            return
        h0_row = slot * stride_h0
    # One load whatever the mode (READ_ZERO masks it all off, touching no memory): a load under a branch would give
    # the state a second layout, converted through shared memory where the branches meet.
    S = tl.load(h0_ptr + h0_row + state_off, mask=state_mask & (read_mode != 0), other=0.0).to(tl.float32)

    for t in range(bos, eos):
        q = tl.load(q_ptr + t * stride_q + h * dim_k + rk, mask=km, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + t * stride_k + h * dim_k + rk, mask=km, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + t * stride_v + hv * dim_v + rv, mask=vm, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + t * heads_v + hv).to(tl.float32)
        beta = tl.load(beta_ptr + t * heads_v + hv).to(tl.float32)
        if raw_gate:  # g holds the raw projection a: decay = -exp(A_log) * softplus(a + dt_bias)
            neg_a = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32))
            x = (g + tl.load(dt_bias_ptr + hv).to(tl.float32)) * softplus_beta
            g = neg_a * tl.where(x <= softplus_threshold, tl.log(1.0 + tl.exp(tl.minimum(x, softplus_threshold))) / softplus_beta, x / softplus_beta)
        if raw_beta:
            beta = tl.sigmoid(beta) * beta_scale
        if qk_l2norm:
            q = q * tl.rsqrt(tl.sum(q * q, 0) + EPS)
            k = k * tl.rsqrt(tl.sum(k * k, 0) + EPS)
        S = S * tl.exp(g)
        delta = (v - tl.sum(S * k[:, None], 0)) * beta
        S = S + k[:, None] * delta[None, :]
        o = tl.sum(S * q[:, None], 0) * scale
        tl.store(o_ptr + (t * heads_v + hv) * dim_v + rv, o.to(o_ptr.dtype.element_ty), mask=vm)
        if write_mode == 3:  # spec verify: the state after draft position t goes to slot indices[seq, t]
            slot_t = tl.load(slot_row + (t - bos)).to(tl.int64)
            if slot_t > 0:
                tl.store(ht_ptr + slot_t * stride_ht + state_off, S.to(ht_ptr.dtype.element_ty), mask=state_mask)
        elif write_mode == 4:
            tl.store(ht_ptr + t * stride_ht + state_off, S.to(ht_ptr.dtype.element_ty), mask=state_mask)

    if write_mode == 1:
        tl.store(ht_ptr + seq * stride_ht + state_off, S.to(ht_ptr.dtype.element_ty), mask=state_mask)
    elif write_mode == 2:
        slot = tl.load(slot_row).to(tl.int64)
        if slot > 0:
            tl.store(ht_ptr + slot * stride_ht + state_off, S.to(ht_ptr.dtype.element_ty), mask=state_mask)


def decode_blocks(dim_k: int, dim_v: int, *, interpreted: bool) -> tuple[int, int, int]:
    """(BK, BV, num_warps): a whole key row per program, value blocks of 8, one warp (two at K=256).

    Against value blocks of 16 to 64 at 1 to 8 warps, blocks of 8 at one warp time fastest or level at every batch
    and step measured, natively on sm_90 and on the sm_75 path (docs/benchmarks.md; K=256 is not measured). Each
    thread then holds 32 fp32 state values (two warps at K=256 keep it so), which sm_75's register file takes
    without spilling (sm75_fit). Triton's interpreter runs programs one after another in Python at a cost per
    program, so there one program takes a head's whole value row (4x fewer programs than blocks of 8 at V=64, and
    about 4x less time).
    """
    bk = head_block(dim_k)
    if interpreted:
        return bk, head_block(dim_v), 1
    return bk, min(8, head_block(dim_v)), 2 if dim_k > 128 else 1


_launch_cache: dict[tuple, tuple] = {}
_launch_recurrent = CachedLaunch(_recurrent_kernel)


def _plan(H: int, HV: int, K: int, V: int, n_seq: int) -> tuple[tuple[int, int], int, int, int]:
    """Grid and blocks, cached so a decode step does no Python arithmetic beyond one dict lookup."""
    key = (H, HV, K, V, n_seq)
    plan = _launch_cache.get(key)
    if plan is None:
        bk, bv, warps = decode_blocks(K, V, interpreted=interpreting())
        plan = ((triton.cdiv(V, bv), n_seq * HV), bk, bv, warps)
        _launch_cache[key] = plan
    return plan


def _slot_stride(cache: torch.Tensor) -> int:
    if cache.stride(-1) != 1 or cache.stride(-2) != cache.shape[-1] or cache.stride(-3) != cache.shape[-1] * cache.shape[-2]:
        raise ValueError("the state cache must be dense within a slot ([HV, K, V] or [HV, V, K])")
    return cache.stride(0)


def _launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    A_log: torch.Tensor | None, dt_bias: torch.Tensor | None, o: torch.Tensor,
    h0: torch.Tensor | None, ht: torch.Tensor | None, slots: torch.Tensor | None, accepted: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None, scale: float, softplus_beta: float, threshold: float, beta_scale: float,
    raw_gate: bool, raw_beta: bool, qk_l2norm: bool, read_mode: int, write_mode: int, v_first: bool,
) -> None:  # fmt: skip
    H, HV, K, V = q.shape[-2], v.shape[-2], q.shape[-1], v.shape[-1]
    B, T = q.shape[0], q.shape[1]
    n_seq = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    grid, bk, bv, warps = _plan(H, HV, K, V, n_seq)
    q, stride_q = token_major(q)
    k, stride_k = token_major(k)
    v, stride_v = token_major(v)
    any_ptr = o  # stands in for pointer arguments a mode does not read
    tensors = (
        q, k, v, g, beta,
        any_ptr if A_log is None else A_log, any_ptr if dt_bias is None else dt_bias, o,
        any_ptr if h0 is None else h0, any_ptr if ht is None else ht,
        any_ptr if slots is None else slots, any_ptr if accepted is None else accepted,
        any_ptr if cu_seqlens is None else cu_seqlens,
    )
    scalars = (
        stride_q, stride_k, stride_v,
        0 if h0 is None else h0.stride(0), 0 if ht is None else ht.stride(0),
        0 if slots is None else slots.stride(0),
        scale, softplus_beta, threshold, beta_scale,
        T, H, HV, K, V,
        int(cu_seqlens is not None), int(raw_gate), int(raw_beta), int(qk_l2norm), read_mode, write_mode,
    )  # fmt: skip
    _launch_recurrent(grid, tensors, scalars, {"BK": bk, "BV": bv, "V_FIRST": v_first}, warps)


def fused_sigmoid_gating_delta_rule_update(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: float = 1.0,
    threshold: float = 20.0,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    inplace_final_state: bool = True,
    cu_seqlens: torch.Tensor | None = None,
    ssm_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    *,
    state_v_first: bool = True,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's decode / spec-verify call (same arguments and meaning as its fused_sigmoid_gating_delta_rule_update).

    q, k [B, T, H, K]; v [B, T, HV, V]; a, b [B*T, HV] (or [B, T, HV]); A_log, dt_bias [HV]; initial_state is the
    fp32 state cache [slots, HV, V, K] (vLLM's layout; state_v_first=False for [slots, HV, K, V]).
    With ssm_state_indices [N] each sequence starts from and writes back to its slot; with [N, 1+S] and
    num_accepted_tokens [N] it starts from slot indices[n, accepted[n]-1] and writes the state after its token t
    into indices[n, t]. Slots <= 0 are null/padding: such a sequence is skipped (its output rows are zero) and
    null slots are never written. inplace_final_state=False returns the state after every token,
    [B*T, HV, V, K], instead of writing the cache. Returns (o [B, T, HV, V] in q's dtype, the state tensor).
    `out` lets the caller hand in the output buffer (saves an allocation per step).
    """
    if initial_state is None:
        raise ValueError("the decode step needs the state cache as initial_state")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    o = out if out is not None else q.new_empty(v.shape)
    if ssm_state_indices is not None:
        read_mode = READ_SPEC_SLOT if num_accepted_tokens is not None else READ_SLOT
    else:
        read_mode = READ_PER_SEQUENCE
    if inplace_final_state:
        if ssm_state_indices is None:
            write_mode = WRITE_PER_SEQUENCE
        else:
            write_mode = WRITE_SPEC_SLOTS if ssm_state_indices.dim() == 2 else WRITE_SLOT
        final = initial_state
    else:
        write_mode = WRITE_PER_TOKEN
        final = initial_state.new_empty(q.shape[0] * q.shape[1], *initial_state.shape[1:])
    _launch(
        q, k, v, a, b, A_log, dt_bias, o, initial_state, final, ssm_state_indices, num_accepted_tokens, cu_seqlens,
        scale, beta, threshold, 1.0, True, True, use_qk_l2norm_in_kernel, read_mode, write_mode, state_v_first,
    )  # fmt: skip
    return o, final


def fused_recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None = None,
    gk: torch.Tensor | None = None,
    gv: torch.Tensor | None = None,
    beta: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fla-core 0.6.0's fused_recurrent_gated_delta_rule: q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV].

    initial_state [N, HV, K, V] (or [N, HV, V, K] with state_v_first). Returns (o [B, T, HV, V] in q's dtype,
    final state fp32 of the same layout, or None). Per-key/per-value gates (gk, gv) are not supported.
    """
    if gk is not None or gv is not None:
        raise NotImplementedError("caovan GDN: per-key/per-value gates (gk, gv) are not supported; pass g")
    H, HV, K, V = check_heads(q, k, v)
    B, T = q.shape[0], q.shape[1]
    if cu_seqlens is not None and B != 1:
        raise ValueError(f"with cu_seqlens the batch dim must be 1 (flattened sequences), got {B}")
    if g is None:
        raise ValueError("g (log-space decay, or raw gate input with use_gate_in_kernel) is required")
    if beta is None:
        beta = torch.ones(B, T, HV, dtype=q.dtype, device=q.device)
    if use_gate_in_kernel and (A_log is None or dt_bias is None):
        raise ValueError("use_gate_in_kernel needs A_log and dt_bias")
    if scale is None:
        scale = K**-0.5
    n_seq = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    o = q.new_empty(v.shape)
    final = None
    if output_final_state:
        shape = (n_seq, HV, V, K) if state_v_first else (n_seq, HV, K, V)
        final = torch.empty(shape, dtype=torch.float32, device=q.device)
    h0 = initial_state.contiguous() if initial_state is not None else None
    _launch(
        q, k, v, g.contiguous(), beta.contiguous(), A_log, dt_bias, o, h0, final, None, None, cu_seqlens,
        scale, 1.0, 20.0, 2.0 if allow_neg_eigval else 1.0, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
        use_qk_l2norm_in_kernel, READ_PER_SEQUENCE if h0 is not None else READ_ZERO,
        WRITE_PER_SEQUENCE if final is not None else WRITE_NONE, state_v_first,
    )  # fmt: skip
    return o, final
