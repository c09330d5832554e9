"""Chunked (WY-form) Gated DeltaNet prefill in Triton, drop-in for fla-core 0.6.0's chunk_gated_delta_rule.

Per 64-token chunk, with cumulative log decays G_i, A_ij = beta_i exp(G_i - G_j) k_i.k_j (i > j) and the inverse
with the write strengths folded into its columns, Ti = (I + A)^-1 diag(beta):

    Ti, Aqk = tril(exp(G_i - G_j) q_i.k_j) scale                   (kernel 1, chunk_gates + chunk_wy: one program
                                                                       per chunk, value head and part)
    v' = Ti (v - exp(G) (k S))                                        (kernel 2, chunk_h: one program per sequence,
    S <- exp(G_last) S + k^T (exp(G_last - G) v')                      value head and value block, chunks in order)
    o  = scale exp(G) (q S) + Aqk v'                                  (kernel 3, chunk_o: every chunk at once; or
                                                                       kernel 2)

On sm_75 the classic WY form's w = Ti exp(G) k and u = Ti v are never formed: kernel 2 applies Ti to the chunk's
residual instead, which costs it one 64x64 product per step and saves writing and reading w and u (4 bytes per
token, value head and head-dim element in fp16), what a 2080 Ti's memory pays for most. On sm_80+ a kernel of their
own forms w and u for all chunks at once and kernel 2 walks v' = u - w S: two products per step on the serial chain
instead of three, for memory traffic an H200 hardly notices. With tensor cores kernel 2 writes each chunk's
starting state and v' for kernel 3, which forms the outputs of all chunks in parallel; where dots are FMA kernel 2
forms the outputs itself. Which of these forms runs, with which launch shapes, is the plan's (plan.py), resolved
once per device, dtype, head dims and TensorCore75 state. reference.chunked_gated_delta_rule is the same algorithm
in plain torch.
"""

from __future__ import annotations

import torch
import triton

from caovan_kernels.gdn._common import CHUNK, SUB, check_heads, token_major
from caovan_kernels.gdn.chunk_h import (
    STATE_CACHE_SLOTS,
    STATE_NONE,
    STATE_PER_SEQUENCE,
    _chunk_state_output_kernel,
    _chunk_state_wu_kernel,
)
from caovan_kernels.gdn.chunk_o import _chunk_output_kernel
from caovan_kernels.gdn.chunk_wy import _chunk_wu_kernel, _chunk_wy_kernel
from caovan_kernels.gdn.l2norm import l2norm_scale
from caovan_kernels.gdn.plan import FMA, DotPlan, PrefillBlocks, prefill_plan
from caovan_kernels.tensorcore75 import retargets_fp16_dots

_uniform_bounds: dict[tuple[int, int, torch.device], torch.Tensor] = {}


def _uniform_cu_seqlens(batch: int, length: int, device: torch.device) -> torch.Tensor:
    key = (batch, length, device)
    cu = _uniform_bounds.get(key)
    if cu is None:
        cu = torch.arange(0, (batch + 1) * length, length, dtype=torch.int32, device=device)
        _uniform_bounds[key] = cu
    return cu


def chunk_table(cu_seqlens: torch.Tensor, total_tokens: int) -> torch.Tensor:
    """[(sequence, chunk-in-sequence)] for every 64-token chunk, padded with (-1, 0) to an upper bound.

    Built on the device without a host sync (the bound total_tokens // 64 + N is known from shapes alone), in
    the same layout as fla's chunk_indices.
    """
    n = cu_seqlens.numel() - 1
    bound = total_tokens // CHUNK + n
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    chunks = (lengths + CHUNK - 1) // CHUNK
    ends = torch.cumsum(chunks, 0)
    c = torch.arange(bound, device=cu_seqlens.device)
    seq = torch.searchsorted(ends, c, right=True)
    valid = seq < n
    seq = seq.clamp(max=n - 1)
    local = c - (ends[seq] - chunks[seq])
    return torch.stack((torch.where(valid, seq, -1), torch.where(valid, local, 0)), 1).to(torch.int32)


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    cu_seqlens_cpu: torch.Tensor | None = None,
    chunk_indices: torch.Tensor | None = None,
    cp_context: object | None = None,
    *,
    use_gate_in_kernel: bool = False,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    ssm_state_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    core_attn_out: torch.Tensor | None = None,
    plan: DotPlan | None = None,
    blocks: PrefillBlocks | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gated DeltaNet prefill, fla-core 0.6.0's call: q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV].

    Returns (o [B, T, HV, V] in q's dtype, final state [N, HV, K, V] fp32 (or [N, HV, V, K] with state_v_first)
    when output_final_state, else None). With cu_seqlens (N + 1 bounds) B must be 1.

    State-cache mode (what vLLM needs): pass the cache [slots, HV, K, V] (or [slots, HV, V, K]) as
    initial_state and ssm_state_indices [N]: sequence n starts from slot ssm_state_indices[n] (from zero where
    has_initial_state[n] is False) and, when output_final_state, its final state is written back into that slot
    in place; the cache itself is returned. Slots <= 0 (vLLM's null block, padding) are neither read nor written.
    chunk_indices (fla's layout, chunk size 64) skips building the chunk table; cu_seqlens_cpu is not needed.
    plan: how the products run (default: the compile target's own); tests pass one to run the tensor-core forms
    through the interpreter. blocks: launch shapes (default: the target's own for the plan's form); the benchmarks
    sweep them, and blocks kernel 2 cannot run with on the target raise UnlaunchableBlocks. Both defaults come
    from plan.prefill_plan, resolved once per device, dtype, head dims and TensorCore75 state.
    """
    if cp_context is not None:
        raise NotImplementedError("caovan GDN: context parallelism (cp_context) is a training feature; not supported")
    H, HV, K, V = check_heads(q, k, v)
    B, T = q.shape[0], q.shape[1]
    if cu_seqlens is not None and B != 1:
        raise ValueError(f"with cu_seqlens the batch dim must be 1 (flattened sequences), got {B}")
    if scale is None:
        scale = K**-0.5
    if use_gate_in_kernel and (A_log is None or dt_bias is None):
        raise ValueError("use_gate_in_kernel needs A_log and dt_bias")
    device = q.device
    total = B * T
    cu = cu_seqlens if cu_seqlens is not None else _uniform_cu_seqlens(B, T, device)
    n_seq = cu.numel() - 1

    if use_qk_l2norm_in_kernel:
        q, k = l2norm_scale(q), l2norm_scale(k)
    q, stride_q = token_major(q)
    k, stride_k = token_major(k)
    v, stride_v = token_major(v)
    g, beta = g.contiguous(), beta.contiguous()

    work_dtype = q.dtype
    tinv = torch.empty(total, HV, CHUNK, dtype=work_dtype, device=device)
    aqk = torch.empty(total, HV, CHUNK, dtype=work_dtype, device=device)
    gcum = torch.empty(total, HV, dtype=torch.float32, device=device)
    if core_attn_out is not None:
        o = core_attn_out.view(B, T, HV, V)
    else:
        o = torch.empty(B, T, HV, V, dtype=q.dtype, device=device)
    if total == 0:
        return o, None

    table = chunk_indices.to(torch.int32) if chunk_indices is not None else chunk_table(cu, total)
    launch = prefill_plan(device, q.dtype, K, V, retargets_fp16_dots(), plan, blocks)
    dots, blocks = launch.dots, launch.blocks
    _chunk_wy_kernel[(table.shape[0], 2 * HV)](
        q, k, g, beta, A_log if use_gate_in_kernel else g, dt_bias if use_gate_in_kernel else g,
        tinv, aqk, gcum, table, cu,
        stride_q, stride_k, scale, 2.0 if allow_neg_eigval else 1.0,
        H, HV, K, int(use_gate_in_kernel), int(use_beta_sigmoid_in_kernel),
        BKC=blocks.bkc, SUB=SUB, DOT=dots.precision, NATIVE=dots.native, TENSOR_CORES=dots.form != FMA,
        num_warps=blocks.warps1,
    )  # fmt: skip

    state_shape = (n_seq, HV, V, K) if state_v_first else (n_seq, HV, K, V)
    final = None
    slots = has_init = gcum  # placeholders for unused pointer arguments
    if ssm_state_indices is not None:
        if initial_state is None:
            raise ValueError("ssm_state_indices needs the state cache passed as initial_state")
        h0_mode, ht_mode = STATE_CACHE_SLOTS, (STATE_CACHE_SLOTS if output_final_state else STATE_NONE)
        cache = initial_state
        if cache.stride(-1) != 1 or cache.stride(-2) != cache.shape[-1] or cache.stride(-3) != cache.shape[-1] * cache.shape[-2]:
            raise ValueError("the state cache must be dense within a slot ([HV, K, V] or [HV, V, K])")
        h0, ht, stride_state, slots = cache, cache, cache.stride(0), ssm_state_indices
        final = cache if output_final_state else None
    else:
        h0_mode = STATE_PER_SEQUENCE if initial_state is not None else STATE_NONE
        ht_mode = STATE_PER_SEQUENCE if output_final_state else STATE_NONE
        h0 = initial_state.contiguous() if initial_state is not None else gcum
        if output_final_state:
            final = torch.empty(state_shape, dtype=torch.float32, device=device)
        ht = final if final is not None else gcum
        stride_state = HV * K * V
    if has_initial_state is not None:
        has_init = has_initial_state.to(torch.int8)

    grid = (triton.cdiv(V, blocks.bv), n_seq * HV)
    scratch_size = grid[0] * grid[1] * blocks.bk * blocks.bv
    scratch = gcum if blocks.split_k == blocks.bk else torch.empty(scratch_size, dtype=torch.float32, device=device)
    hs = vnew = gcum
    if blocks.parallel_output:  # each chunk's starting state and v', in the dtype the products take them
        op_dtype = work_dtype if dots.native else torch.float32
        hs = torch.empty(total // CHUNK + n_seq, HV, K, V, dtype=op_dtype, device=device)
        vnew = torch.empty(total, HV, V, dtype=op_dtype, device=device)
    if blocks.wu_ahead:
        w = torch.empty(total, HV, K, dtype=hs.dtype, device=device)
        u = torch.empty(total, HV, V, dtype=hs.dtype, device=device)
        _chunk_wu_kernel[(table.shape[0], HV)](
            k, v, tinv, gcum, w, u, table, cu,
            stride_k, stride_v, H, HV, K, V,
            BT=CHUNK, BC=launch.bc_wu, DOT=dots.precision, NATIVE=dots.native,
            num_warps=blocks.warps_wu,
        )  # fmt: skip
        _chunk_state_wu_kernel[grid](
            k, w, u, gcum,
            h0, ht, slots, has_init, cu, hs, vnew,
            stride_k, stride_state, H, HV, K, V,
            h0_mode, ht_mode, int(has_initial_state is not None),
            BT=CHUNK, BK=blocks.bk, BV=blocks.bv, V_FIRST=state_v_first, DOT=dots.precision, NATIVE=dots.native,
            num_warps=blocks.warps2,
        )  # fmt: skip
    else:
        _chunk_state_output_kernel[grid](
            q, k, v, tinv, aqk, gcum, o,
            h0, ht, slots, has_init, cu, scratch, hs, vnew,
            stride_q, stride_k, stride_v, stride_state, scale,
            H, HV, K, V,
            h0_mode, ht_mode, int(has_initial_state is not None),
            BT=CHUNK, BK=blocks.bk, BV=blocks.bv, SPLIT_K=blocks.split_k, V_FIRST=state_v_first, DOT=dots.precision,
            NATIVE=dots.native, PREFETCH=blocks.prefetch, PARALLEL_OUT=blocks.parallel_output,
            num_warps=blocks.warps2,
        )  # fmt: skip
    if blocks.parallel_output:
        _chunk_output_kernel[(table.shape[0], HV, triton.cdiv(V, launch.bv3))](
            q, vnew, hs, aqk, gcum, o, table, cu,
            stride_q, scale, H, HV, K, V,
            BT=CHUNK, BK=blocks.bk, BV=launch.bv3, DOT=dots.precision, NATIVE=dots.native, num_warps=blocks.warps3,
        )  # fmt: skip
    return o, final
