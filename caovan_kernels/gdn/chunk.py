"""Chunked (WY-form) Gated DeltaNet prefill in Triton, drop-in for fla-core 0.6.0's chunk_gated_delta_rule.

Per 64-token chunk, with cumulative log decays G_i, A_ij = beta_i exp(G_i - G_j) k_i.k_j (i > j) and the inverse
with the write strengths folded into its columns, Ti = (I + A)^-1 diag(beta):

    Ti, Aqk = tril(exp(G_i - G_j) q_i.k_j) scale                   (kernel 1, one program per chunk, value head
                                                                       and part: Ti and G; Aqk)
    v' = Ti (v - exp(G) (k S))                                        (kernel 2, one program per sequence, value
    S <- exp(G_last) S + k^T (exp(G_last - G) v')                      head and value block, chunks in order)
    o  = scale exp(G) (q S) + Aqk v'                                  (kernel 3, every chunk at once; or kernel 2)

Kernel 1 works in 16-row sub-blocks: it inverts the four diagonal 16x16 blocks of I + A by substitution and forms
the six blocks below them by block forward substitution; Aqk comes from a program of its own. On sm_75 the classic
WY form's w = Ti exp(G) k and u = Ti v are never formed: kernel 2 applies Ti to the chunk's residual instead, which
costs it one 64x64 product per step and saves writing and reading w and u (4 bytes per token, value head and
head-dim element in fp16), what a 2080 Ti's memory pays for most. On sm_80+ (PrefillBlocks.wu_ahead) a kernel of
their own forms w and u for all chunks at once and kernel 2 walks v' = u - w S: two products per step on the serial
chain instead of three, for memory traffic an H200 hardly notices. The state S stays fp32 in kernel 2 for the whole
sequence (in registers; where dots are FMA, in a per-program scratch, see prefill_blocks). With tensor cores kernel
2 writes each chunk's starting state (in the operand dtype) and v' for kernel 3, which forms the outputs of all
chunks in parallel: the serial walk then holds three products per chunk instead of five
(PrefillBlocks.parallel_output). Where dots are FMA kernel 2 forms the outputs itself, and only Ti, Aqk (input
dtype) and G (fp32) go through memory. How the products run (operand dtype, block sizes) follows a DotPlan: tensor
cores on sm_80+ and on sm_75 where TensorCore75 retargets fp16 dots, FMA otherwise.
reference.chunked_gated_delta_rule is the same algorithm in plain torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from caovan_kernels.gdn._common import (
    CHUNK, FMA, SUB, TURING_MMA, DotPlan, check_heads, compile_arch, dot_plan, head_block, token_major,
)
from caovan_kernels.gdn.l2norm import l2norm_scale

# State I/O modes of kernel 2 (runtime ints: one compiled kernel serves all of them).
STATE_NONE, STATE_PER_SEQUENCE, STATE_CACHE_SLOTS = 0, 1, 2


@triton.jit
def _decayed(x, gi, gj, MASK: tl.constexpr, SUB: tl.constexpr):
    """x * exp(gi - gj) on a 16x16 block; MASK 0: full, 1: strictly lower, 2: lower with diagonal."""
    d = gi[:, None] - gj[None, :]
    if MASK == 0:
        return x * tl.exp(d)
    r = tl.arange(0, SUB)
    if MASK == 1:
        keep = r[:, None] > r[None, :]
    else:
        keep = r[:, None] >= r[None, :]
    # exp only where kept: above the diagonal gi - gj > 0 can overflow
    return tl.where(keep, x * tl.exp(tl.where(keep, d, 0.0)), 0.0)


@triton.jit
def _unit_lower_inverse(a, SUB: tl.constexpr):
    """(I + a)^-1 for strictly lower-triangular a [SUB, SUB], row by row: row_i = e_i - sum_{j<i} a_ij row_j."""
    r = tl.arange(0, SUB)
    inv = (r[:, None] == r[None, :]).to(tl.float32)
    for i in tl.static_range(1, SUB):
        a_row = tl.sum(tl.where(r[:, None] == i, a, 0.0), 0)
        new_row = (r == i).to(tl.float32) - tl.sum(a_row[:, None] * inv, 0)
        inv = tl.where(r[:, None] == i, new_row[None, :], inv)
    return inv


@triton.jit
def _lower_inverse_blocks(d1, d2, d3, e0, e1, e2, a10, a20, a21, a30, a31, a32, DOT: tl.constexpr):
    """The six blocks below the diagonal of (I + A)^-1 diag(beta), by block forward substitution from the inverted
    diagonal blocks D_i of I + A: T_ij = -D_i sum_{j <= m < i} A_im T_mj, which holds for the column-scaled blocks
    as it does for the plain ones, starting from T_jj = E_j = D_j diag(beta_j). Products take their operands in
    d1's dtype with fp32 accumulation; sums stay fp32 until used as one."""
    op_t = d1.dtype
    t10 = -tl.dot(d1, tl.dot(a10, e0, input_precision=DOT).to(op_t), input_precision=DOT)
    t21 = -tl.dot(d2, tl.dot(a21, e1, input_precision=DOT).to(op_t), input_precision=DOT)
    t32 = -tl.dot(d3, tl.dot(a32, e2, input_precision=DOT).to(op_t), input_precision=DOT)
    t10_op, t21_op = t10.to(op_t), t21.to(op_t)
    r20 = tl.dot(a20, e0, input_precision=DOT) + tl.dot(a21, t10_op, input_precision=DOT)
    t20 = -tl.dot(d2, r20.to(op_t), input_precision=DOT)
    r31 = tl.dot(a31, e1, input_precision=DOT) + tl.dot(a32, t21_op, input_precision=DOT)
    t31 = -tl.dot(d3, r31.to(op_t), input_precision=DOT)
    r30 = (tl.dot(a30, e0, input_precision=DOT) + tl.dot(a31, t10_op, input_precision=DOT)
           + tl.dot(a32, t20.to(op_t), input_precision=DOT))
    t30 = -tl.dot(d3, r30.to(op_t), input_precision=DOT)
    return t10, t20, t21, t30, t31, t32


@triton.jit
def _load_rows(ptr, tok, tok_mask, stride_tok, offset, cols, col_mask):
    return tl.load(ptr + tok[:, None] * stride_tok + offset + cols[None, :], mask=tok_mask[:, None] & col_mask[None, :], other=0.0)


@triton.jit
def _store_rows(ptr, x, tok, tok_mask, stride_tok, offset, cols, col_mask):
    tl.store(ptr + tok[:, None] * stride_tok + offset + cols[None, :], x.to(ptr.dtype.element_ty), mask=tok_mask[:, None] & col_mask[None, :])


@triton.jit
def _chunk_bounds(chunk_ptr, cu_ptr, c, BT: tl.constexpr):
    """Entry c of the chunk table: (sequence, the chunk's first token, the sequence's end). The sequence is
    negative for a padding entry (the table's length is an upper bound), which the caller skips; its bounds are
    then read from sequence 0, in range."""
    seq = tl.load(chunk_ptr + 2 * c).to(tl.int64)
    first = tl.maximum(seq, 0)
    eos = tl.load(cu_ptr + first + 1).to(tl.int64)
    t0 = tl.load(cu_ptr + first).to(tl.int64) + tl.load(chunk_ptr + 2 * c + 1).to(tl.int64) * BT
    return seq, t0, eos


@triton.jit
def _chunk_wy_kernel(
    q_ptr, k_ptr, g_ptr, beta_ptr, A_log_ptr, dt_bias_ptr,
    tinv_ptr, aqk_ptr, gcum_ptr,
    chunk_ptr, cu_ptr,
    stride_q, stride_k, scale, beta_scale,
    heads_k, heads_v, dim_k,
    raw_gate, raw_beta,
    BKC: tl.constexpr, SUB: tl.constexpr, DOT: tl.constexpr, NATIVE: tl.constexpr, TENSOR_CORES: tl.constexpr,
):  # fmt: skip
    """One (chunk, value head, part): part 0 writes G and Ti = (I + A)^-1 diag(beta), part 1 Aqk, rows token-major
    like q ([tokens, HV, 64]). The parts share only G (each computes it): as two programs they run side by side
    and each holds half the live values one program holding both did (at 1 warp that one spilled on sm_75).
    NATIVE: the k k^T and q k^T products take the input dtype (see _chunk_state_output_kernel). TENSOR_CORES: the
    inverse's block products do too; otherwise they multiply fp32 (FMA dots, where fp32 operands cost nothing
    extra and keep the inverse's digits)."""
    c, hv, part = tl.program_id(0), tl.program_id(1) // 2, tl.program_id(1) % 2
    op_t = k_ptr.dtype.element_ty if NATIVE else tl.float32
    solve_t = op_t if TENSOR_CORES else tl.float32
    seq, start, eos = _chunk_bounds(chunk_ptr, cu_ptr, c, 4 * SUB)
    if seq < 0:
        return
    h = hv // (heads_v // heads_k)
    r = tl.arange(0, SUB)
    t0 = start + r
    t1 = t0 + SUB
    t2 = t1 + SUB
    t3 = t2 + SUB
    m0, m1, m2, m3 = t0 < eos, t1 < eos, t2 < eos, t3 < eos

    # log decays, cumulative within the chunk
    g0 = tl.load(g_ptr + t0 * heads_v + hv, mask=m0, other=0.0).to(tl.float32)
    g1 = tl.load(g_ptr + t1 * heads_v + hv, mask=m1, other=0.0).to(tl.float32)
    g2 = tl.load(g_ptr + t2 * heads_v + hv, mask=m2, other=0.0).to(tl.float32)
    g3 = tl.load(g_ptr + t3 * heads_v + hv, mask=m3, other=0.0).to(tl.float32)
    if raw_gate:  # g holds a raw projection: decay = -exp(A_log) * softplus(g + dt_bias)
        neg_a = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32))
        bias = tl.load(dt_bias_ptr + hv).to(tl.float32)
        g0 = tl.where(m0, neg_a * _softplus(g0 + bias), 0.0)
        g1 = tl.where(m1, neg_a * _softplus(g1 + bias), 0.0)
        g2 = tl.where(m2, neg_a * _softplus(g2 + bias), 0.0)
        g3 = tl.where(m3, neg_a * _softplus(g3 + bias), 0.0)
    G0 = tl.cumsum(g0, 0)
    G1 = tl.cumsum(g1, 0) + tl.sum(g0, 0)
    G2 = tl.cumsum(g2, 0) + tl.sum(g0, 0) + tl.sum(g1, 0)
    G3 = tl.cumsum(g3, 0) + tl.sum(g0, 0) + tl.sum(g1, 0) + tl.sum(g2, 0)
    off_k = h * dim_k
    if part == 1:
        _chunk_aqk(q_ptr, k_ptr, aqk_ptr, t0, t1, t2, t3, m0, m1, m2, m3, G0, G1, G2, G3, stride_q, stride_k, off_k,
                   hv * 4 * SUB, heads_v * 4 * SUB, scale, dim_k, op_t, BKC, SUB, DOT)
        return
    tl.store(gcum_ptr + t0 * heads_v + hv, G0, mask=m0)
    tl.store(gcum_ptr + t1 * heads_v + hv, G1, mask=m1)
    tl.store(gcum_ptr + t2 * heads_v + hv, G2, mask=m2)
    tl.store(gcum_ptr + t3 * heads_v + hv, G3, mask=m3)
    b0 = tl.load(beta_ptr + t0 * heads_v + hv, mask=m0, other=0.0).to(tl.float32)
    b1 = tl.load(beta_ptr + t1 * heads_v + hv, mask=m1, other=0.0).to(tl.float32)
    b2 = tl.load(beta_ptr + t2 * heads_v + hv, mask=m2, other=0.0).to(tl.float32)
    b3 = tl.load(beta_ptr + t3 * heads_v + hv, mask=m3, other=0.0).to(tl.float32)
    if raw_beta:  # beta holds logits
        b0 = tl.where(m0, tl.sigmoid(b0) * beta_scale, 0.0)
        b1 = tl.where(m1, tl.sigmoid(b1) * beta_scale, 0.0)
        b2 = tl.where(m2, tl.sigmoid(b2) * beta_scale, 0.0)
        b3 = tl.where(m3, tl.sigmoid(b3) * beta_scale, 0.0)

    # k k^T sub-blocks on or below the diagonal, accumulated over key columns
    z = tl.zeros([SUB, SUB], dtype=tl.float32)
    kk10, kk20, kk21, kk30, kk31, kk32 = z, z, z, z, z, z
    kk00, kk11, kk22, kk33 = z, z, z, z
    for kc in range(0, dim_k, BKC):
        cols = kc + tl.arange(0, BKC)
        cm = cols < dim_k
        k0 = _load_rows(k_ptr, t0, m0, stride_k, off_k, cols, cm).to(op_t)
        k1 = _load_rows(k_ptr, t1, m1, stride_k, off_k, cols, cm).to(op_t)
        k2 = _load_rows(k_ptr, t2, m2, stride_k, off_k, cols, cm).to(op_t)
        k3 = _load_rows(k_ptr, t3, m3, stride_k, off_k, cols, cm).to(op_t)
        k0t, k1t, k2t, k3t = tl.trans(k0), tl.trans(k1), tl.trans(k2), tl.trans(k3)
        kk00 = tl.dot(k0, k0t, kk00, input_precision=DOT)
        kk10 = tl.dot(k1, k0t, kk10, input_precision=DOT)
        kk11 = tl.dot(k1, k1t, kk11, input_precision=DOT)
        kk20 = tl.dot(k2, k0t, kk20, input_precision=DOT)
        kk21 = tl.dot(k2, k1t, kk21, input_precision=DOT)
        kk22 = tl.dot(k2, k2t, kk22, input_precision=DOT)
        kk30 = tl.dot(k3, k0t, kk30, input_precision=DOT)
        kk31 = tl.dot(k3, k1t, kk31, input_precision=DOT)
        kk32 = tl.dot(k3, k2t, kk32, input_precision=DOT)
        kk33 = tl.dot(k3, k3t, kk33, input_precision=DOT)

    # A = beta_i exp(G_i - G_j) k_i.k_j below the diagonal; invert the diagonal blocks of I + A (in fp32, rounded
    # once as an operand), then the blocks below them
    a10 = (_decayed(kk10, G1, G0, 0, SUB) * b1[:, None]).to(solve_t)
    a20 = (_decayed(kk20, G2, G0, 0, SUB) * b2[:, None]).to(solve_t)
    a21 = (_decayed(kk21, G2, G1, 0, SUB) * b2[:, None]).to(solve_t)
    a30 = (_decayed(kk30, G3, G0, 0, SUB) * b3[:, None]).to(solve_t)
    a31 = (_decayed(kk31, G3, G1, 0, SUB) * b3[:, None]).to(solve_t)
    a32 = (_decayed(kk32, G3, G2, 0, SUB) * b3[:, None]).to(solve_t)
    d0 = _unit_lower_inverse(_decayed(kk00, G0, G0, 1, SUB) * b0[:, None], SUB)
    d1 = _unit_lower_inverse(_decayed(kk11, G1, G1, 1, SUB) * b1[:, None], SUB)
    d2 = _unit_lower_inverse(_decayed(kk22, G2, G2, 1, SUB) * b2[:, None], SUB)
    d3 = _unit_lower_inverse(_decayed(kk33, G3, G3, 1, SUB) * b3[:, None], SUB)
    # Ti = (I + A)^-1 diag(beta): column block j scaled by beta_j, here on the diagonal blocks, so that the
    # substitution forms the scaled blocks below them and beta is not live past this point (at 1 warp on sm_75
    # those registers were the difference between spilling and not). Above the diagonal stays unwritten (kernel 2
    # masks).
    e0, e1, e2, e3 = d0 * b0[None, :], d1 * b1[None, :], d2 * b2[None, :], d3 * b3[None, :]
    t10, t20, t21, t30, t31, t32 = _lower_inverse_blocks(
        d1.to(solve_t), d2.to(solve_t), d3.to(solve_t), e0.to(solve_t), e1.to(solve_t), e2.to(solve_t),
        a10, a20, a21, a30, a31, a32, DOT)
    ld_t = heads_v * 4 * SUB
    off_t = hv * 4 * SUB
    _store_rows(tinv_ptr, e0, t0, m0, ld_t, off_t, r, r < SUB)
    _store_rows(tinv_ptr, t10, t1, m1, ld_t, off_t, r, r < SUB)
    _store_rows(tinv_ptr, e1, t1, m1, ld_t, off_t + SUB, r, r < SUB)
    _store_rows(tinv_ptr, t20, t2, m2, ld_t, off_t, r, r < SUB)
    _store_rows(tinv_ptr, t21, t2, m2, ld_t, off_t + SUB, r, r < SUB)
    _store_rows(tinv_ptr, e2, t2, m2, ld_t, off_t + 2 * SUB, r, r < SUB)
    _store_rows(tinv_ptr, t30, t3, m3, ld_t, off_t, r, r < SUB)
    _store_rows(tinv_ptr, t31, t3, m3, ld_t, off_t + SUB, r, r < SUB)
    _store_rows(tinv_ptr, t32, t3, m3, ld_t, off_t + 2 * SUB, r, r < SUB)
    _store_rows(tinv_ptr, e3, t3, m3, ld_t, off_t + 3 * SUB, r, r < SUB)


@triton.jit
def _chunk_aqk(
    q_ptr, k_ptr, aqk_ptr, t0, t1, t2, t3, m0, m1, m2, m3, G0, G1, G2, G3, stride_q, stride_k, off_k, off_a, ld_a,
    scale, dim_k, op_t: tl.constexpr, BKC: tl.constexpr, SUB: tl.constexpr, DOT: tl.constexpr,
):  # fmt: skip
    """Kernel 1's part 1: the chunk's gated intra-chunk attention for kernel 2 (row block i, column block j <= i;
    kernel 2 masks j > i)."""
    r = tl.arange(0, SUB)
    z = tl.zeros([SUB, SUB], dtype=tl.float32)
    qk00, qk10, qk11, qk20, qk21, qk22, qk30, qk31, qk32, qk33 = z, z, z, z, z, z, z, z, z, z
    for kc in range(0, dim_k, BKC):
        cols = kc + tl.arange(0, BKC)
        cm = cols < dim_k
        k0t = tl.trans(_load_rows(k_ptr, t0, m0, stride_k, off_k, cols, cm).to(op_t))
        k1t = tl.trans(_load_rows(k_ptr, t1, m1, stride_k, off_k, cols, cm).to(op_t))
        k2t = tl.trans(_load_rows(k_ptr, t2, m2, stride_k, off_k, cols, cm).to(op_t))
        k3t = tl.trans(_load_rows(k_ptr, t3, m3, stride_k, off_k, cols, cm).to(op_t))
        q0 = _load_rows(q_ptr, t0, m0, stride_q, off_k, cols, cm).to(op_t)
        q1 = _load_rows(q_ptr, t1, m1, stride_q, off_k, cols, cm).to(op_t)
        q2 = _load_rows(q_ptr, t2, m2, stride_q, off_k, cols, cm).to(op_t)
        q3 = _load_rows(q_ptr, t3, m3, stride_q, off_k, cols, cm).to(op_t)
        qk00 = tl.dot(q0, k0t, qk00, input_precision=DOT)
        qk10 = tl.dot(q1, k0t, qk10, input_precision=DOT)
        qk11 = tl.dot(q1, k1t, qk11, input_precision=DOT)
        qk20 = tl.dot(q2, k0t, qk20, input_precision=DOT)
        qk21 = tl.dot(q2, k1t, qk21, input_precision=DOT)
        qk22 = tl.dot(q2, k2t, qk22, input_precision=DOT)
        qk30 = tl.dot(q3, k0t, qk30, input_precision=DOT)
        qk31 = tl.dot(q3, k1t, qk31, input_precision=DOT)
        qk32 = tl.dot(q3, k2t, qk32, input_precision=DOT)
        qk33 = tl.dot(q3, k3t, qk33, input_precision=DOT)
    _store_rows(aqk_ptr, _decayed(qk00, G0, G0, 2, SUB) * scale, t0, m0, ld_a, off_a, r, r < SUB)
    _store_rows(aqk_ptr, _decayed(qk10, G1, G0, 0, SUB) * scale, t1, m1, ld_a, off_a, r, r < SUB)
    _store_rows(aqk_ptr, _decayed(qk11, G1, G1, 2, SUB) * scale, t1, m1, ld_a, off_a + SUB, r, r < SUB)
    _store_rows(aqk_ptr, _decayed(qk20, G2, G0, 0, SUB) * scale, t2, m2, ld_a, off_a, r, r < SUB)
    _store_rows(aqk_ptr, _decayed(qk21, G2, G1, 0, SUB) * scale, t2, m2, ld_a, off_a + SUB, r, r < SUB)
    _store_rows(aqk_ptr, _decayed(qk22, G2, G2, 2, SUB) * scale, t2, m2, ld_a, off_a + 2 * SUB, r, r < SUB)
    _store_rows(aqk_ptr, _decayed(qk30, G3, G0, 0, SUB) * scale, t3, m3, ld_a, off_a, r, r < SUB)
    _store_rows(aqk_ptr, _decayed(qk31, G3, G1, 0, SUB) * scale, t3, m3, ld_a, off_a + SUB, r, r < SUB)
    _store_rows(aqk_ptr, _decayed(qk32, G3, G2, 0, SUB) * scale, t3, m3, ld_a, off_a + 2 * SUB, r, r < SUB)
    _store_rows(aqk_ptr, _decayed(qk33, G3, G3, 2, SUB) * scale, t3, m3, ld_a, off_a + 3 * SUB, r, r < SUB)


@triton.jit
def _softplus(x):
    # torch's softplus with beta 1 and threshold 20, as vLLM's gate uses
    return tl.where(x <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))), x)


@triton.jit
def _state_offsets(rows_k, cols_v, dim_k, dim_v, V_FIRST: tl.constexpr):
    if V_FIRST:
        return cols_v[None, :] * dim_k + rows_k[:, None]
    return rows_k[:, None] * dim_v + cols_v[None, :]


@triton.jit
def _load_state_rows(base, rk, km, rv, vm, dim_k, dim_v, V_FIRST: tl.constexpr):
    """State rows rk (key index) as fp32 [len(rk), BV]. The [V, K] layout is read along K, its contiguous axis, and
    transposed in registers (reading it as [K, V] directly cost the 4-warp halves form 76 bytes of spills)."""
    if V_FIRST:
        return tl.trans(tl.load(base + rv[:, None] * dim_k + rk[None, :], mask=vm[:, None] & km[None, :], other=0.0)).to(tl.float32)
    return tl.load(base + rk[:, None] * dim_v + rv[None, :], mask=km[:, None] & vm[None, :], other=0.0).to(tl.float32)


@triton.jit
def _store_state_rows(base, S, rk, km, rv, vm, dim_k, dim_v, V_FIRST: tl.constexpr):
    if V_FIRST:
        tl.store(base + rv[:, None] * dim_k + rk[None, :], tl.trans(S).to(base.dtype.element_ty), mask=vm[:, None] & km[None, :])
    else:
        tl.store(base + rk[:, None] * dim_v + rv[None, :], S.to(base.dtype.element_ty), mask=km[:, None] & vm[None, :])


@triton.jit
def _key_rows(ptr, t0, eos, h, rt, rk, km, stride, dim_k):
    """Columns rk of key head h (q or k) for the chunk at t0; all-masked (no access) from eos on."""
    tok = t0 + rt
    return tl.load(ptr + tok[:, None] * stride + h * dim_k + rk[None, :], mask=(tok < eos)[:, None] & km[None, :], other=0.0)


@triton.jit
def _chunk_keys(k_ptr, gcum_ptr, t0, eos, h, hv, rt, rk, km, stride_k, heads_v, dim_k, BT: tl.constexpr):
    """What the chunk at t0 starts kernel 2's chain with: G, G_last and k; all-masked (no access) from eos on."""
    tok = t0 + rt
    tm = tok < eos
    G = tl.load(gcum_ptr + tok * heads_v + hv, mask=tm, other=0.0)
    # clamped: an empty first sequence would point before the tensor
    g_last = tl.load(gcum_ptr + tl.maximum(tl.minimum(t0 + BT, eos) - 1, 0) * heads_v + hv)
    return G, g_last, _key_rows(k_ptr, t0, eos, h, rt, rk, km, stride_k, dim_k)


@triton.jit
def _chunk_values(v_ptr, tinv_ptr, t0, eos, hv, rt, rv, vm, causal, stride_v, heads_v, dim_v, BT: tl.constexpr):
    """The chunk at t0's v and Ti (needed after its first product; Aqk only at its end)."""
    tok = t0 + rt
    tm = tok < eos
    hrow = tok * heads_v + hv
    v = tl.load(v_ptr + tok[:, None] * stride_v + hv * dim_v + rv[None, :], mask=tm[:, None] & vm[None, :], other=0.0)
    ti = tl.load(tinv_ptr + hrow[:, None] * BT + rt[None, :], mask=tm[:, None] & causal, other=0.0)
    return v, ti


@triton.jit
def _store_output(
    o_ptr, aqk_ptr, qs, v_new, row_scale, hrow, rt, tm, causal, rv, vm, dim_v, op_t: tl.constexpr, BT: tl.constexpr,
    DOT: tl.constexpr,
):  # fmt: skip
    """A chunk's output rows: o = row_scale (q S) + Aqk v', with row_scale = scale exp(G)."""
    a = tl.load(aqk_ptr + hrow[:, None] * BT + rt[None, :], mask=tm[:, None] & causal, other=0.0)
    o = qs * row_scale[:, None] + tl.dot(a.to(op_t), v_new.to(op_t), input_precision=DOT)
    tl.store(o_ptr + hrow[:, None] * dim_v + rv[None, :], o.to(o_ptr.dtype.element_ty), mask=tm[:, None] & vm[None, :])


@triton.jit
def _chunk_state_rows(hs_ptr, t0, seq, hv, rk, rv, heads_v, dim_k, dim_v, BT: tl.constexpr):
    """Where rows rk of the state the chunk at t0 starts from live in hs ([index, HV, K, V]). The index, t0 // 64 +
    sequence, is one per chunk (a sequence's chunks start at least 64 tokens apart and after the previous
    sequence's) and below tokens // 64 + sequences."""
    base = hs_ptr + ((t0 // BT + seq) * heads_v + hv).to(tl.int64) * dim_k * dim_v
    return base + rk[:, None] * dim_v + rv[None, :]


@triton.jit
def _chunk_output_kernel(
    q_ptr, vnew_ptr, hs_ptr, aqk_ptr, gcum_ptr, o_ptr, chunk_ptr, cu_ptr,
    stride_q, scale, heads_k, heads_v, dim_k, dim_v,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr, NATIVE: tl.constexpr,
):  # fmt: skip
    """One (chunk, value head, value block) of kernel 2's PARALLEL_OUT form: o = scale exp(G) (q S) + Aqk v' from
    the chunk's starting state and v' that the walk wrote; every chunk at once."""
    c, hv, iv = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    op_t = q_ptr.dtype.element_ty if NATIVE else tl.float32
    seq, t0, eos = _chunk_bounds(chunk_ptr, cu_ptr, c, BT)
    if seq < 0:
        return
    h = hv // (heads_v // heads_k)
    rt = tl.arange(0, BT)
    rk = tl.arange(0, BK)
    rv = iv * BV + tl.arange(0, BV)
    km, vm = rk < dim_k, rv < dim_v
    tok = t0 + rt
    tm = tok < eos
    hrow = tok * heads_v + hv
    q = _key_rows(q_ptr, t0, eos, h, rt, rk, km, stride_q, dim_k).to(op_t)
    s_op = tl.load(_chunk_state_rows(hs_ptr, t0, seq, hv, rk, rv, heads_v, dim_k, dim_v, BT), mask=km[:, None] & vm[None, :], other=0.0).to(op_t)
    qs = tl.dot(q, s_op, input_precision=DOT)
    G = tl.load(gcum_ptr + hrow, mask=tm, other=0.0)
    causal = rt[:, None] >= rt[None, :]
    # Aqk before v': the other order takes 244 registers instead of 108 on sm_75 (K=V=128, 8 warps)
    a = tl.load(aqk_ptr + hrow[:, None] * BT + rt[None, :], mask=tm[:, None] & causal, other=0.0)
    v_new = tl.load(vnew_ptr + hrow[:, None] * dim_v + rv[None, :], mask=tm[:, None] & vm[None, :], other=0.0)
    o = qs * (tl.exp(G) * scale)[:, None] + tl.dot(a.to(op_t), v_new.to(op_t), input_precision=DOT)
    tl.store(o_ptr + hrow[:, None] * dim_v + rv[None, :], o.to(o_ptr.dtype.element_ty), mask=tm[:, None] & vm[None, :])


@triton.jit
def _walk_program(cu_ptr, heads_k, heads_v, dim_v, BV: tl.constexpr):
    """What a kernel-2 program (value block, sequence x value head) walks: (sequence, value head, key head, the
    sequence's first token and end, value columns and their mask)."""
    iv, pid = tl.program_id(0), tl.program_id(1)
    seq, hv = pid // heads_v, pid % heads_v
    bos = tl.load(cu_ptr + seq).to(tl.int64)
    eos = tl.load(cu_ptr + seq + 1).to(tl.int64)
    rv = iv * BV + tl.arange(0, BV)
    return seq, hv, hv // (heads_v // heads_k), bos, eos, rv, rv < dim_v


@triton.jit
def _state_ends(
    h0_ptr, ht_ptr, slot_ptr, has_h0_ptr, seq, hv, stride_state, dim_k, dim_v, h0_mode, ht_mode, use_has_h0,
):  # fmt: skip
    """Where sequence seq's state for value head hv comes from and goes to (its own row, or a slot of vLLM's state
    cache), and whether it is read and written: (load_h0, store_ht, h0_base, ht_base)."""
    row = seq.to(tl.int64)
    if h0_mode == 2 or ht_mode == 2:
        row = tl.load(slot_ptr + seq).to(tl.int64)
    live = row >= 0
    if h0_mode == 2 or ht_mode == 2:
        live = row > 0  # slot 0 is vLLM's null block, negative slots are padding
    load_h0 = (h0_mode != 0) & live
    if use_has_h0:
        load_h0 = load_h0 & (tl.load(has_h0_ptr + seq) != 0)
    store_ht = (ht_mode != 0) & live
    h0_base = h0_ptr + row * stride_state + hv * dim_k * dim_v
    ht_base = ht_ptr + row * stride_state + hv * dim_k * dim_v
    return load_h0, store_ht, h0_base, ht_base


@triton.jit
def _chunk_wu_kernel(
    k_ptr, v_ptr, tinv_ptr, gcum_ptr, w_ptr, u_ptr, chunk_ptr, cu_ptr,
    stride_k, stride_v, heads_k, heads_v, dim_k, dim_v,
    BT: tl.constexpr, BC: tl.constexpr, DOT: tl.constexpr, NATIVE: tl.constexpr,
):  # fmt: skip
    """One (chunk, value head) of the WU_AHEAD form: w = Ti exp(G) k and u = Ti v, rows token-major like k and v
    ([tokens, HV, K] and [tokens, HV, V]), in BC-wide column blocks; every chunk at once."""
    c, hv = tl.program_id(0), tl.program_id(1)
    op_t = k_ptr.dtype.element_ty if NATIVE else tl.float32
    seq, t0, eos = _chunk_bounds(chunk_ptr, cu_ptr, c, BT)
    if seq < 0:
        return
    h = hv // (heads_v // heads_k)
    rt = tl.arange(0, BT)
    tok = t0 + rt
    tm = tok < eos
    hrow = tok * heads_v + hv
    ti = tl.load(tinv_ptr + hrow[:, None] * BT + rt[None, :], mask=tm[:, None] & (rt[:, None] >= rt[None, :]), other=0.0).to(op_t)
    e_g = tl.exp(tl.load(gcum_ptr + hrow, mask=tm, other=0.0))
    for kc in range(0, dim_k, BC):
        cols = kc + tl.arange(0, BC)
        cm = cols < dim_k
        k = _load_rows(k_ptr, tok, tm, stride_k, h * dim_k, cols, cm)
        w = tl.dot(ti, (k.to(tl.float32) * e_g[:, None]).to(op_t), input_precision=DOT)
        _store_rows(w_ptr, w, tok, tm, heads_v * dim_k, hv * dim_k, cols, cm)
    for vc in range(0, dim_v, BC):
        cols = vc + tl.arange(0, BC)
        cm = cols < dim_v
        v = _load_rows(v_ptr, tok, tm, stride_v, hv * dim_v, cols, cm)
        u = tl.dot(ti, v.to(op_t), input_precision=DOT)
        _store_rows(u_ptr, u, tok, tm, heads_v * dim_v, hv * dim_v, cols, cm)


@triton.jit
def _chunk_state_wu_kernel(
    k_ptr, w_ptr, u_ptr, gcum_ptr,
    h0_ptr, ht_ptr, slot_ptr, has_h0_ptr, cu_ptr, hs_ptr, vnew_ptr,
    stride_k, stride_state, heads_k, heads_v, dim_k, dim_v,
    h0_mode, ht_mode, use_has_h0,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, V_FIRST: tl.constexpr, DOT: tl.constexpr,
    NATIVE: tl.constexpr,
):  # fmt: skip
    """Kernel 2 of the WU_AHEAD form, one (value block, sequence, value head): the walk over the chunks with w and u
    formed ahead, v' = u - w S, S <- exp(G_last) S + k^T (exp(G_last - G) v'): two products per chunk in the serial
    chain instead of three. Like _chunk_state_output_kernel's PARALLEL_OUT form it writes each chunk's starting state
    and v' for _chunk_output_kernel. The state is fp32 in registers; loads sit beside their first use (see
    _chunk_state_output_kernel on Triton 3.6's sm_90 code)."""
    op_t = k_ptr.dtype.element_ty if NATIVE else tl.float32
    seq, hv, h, bos, eos, rv, vm = _walk_program(cu_ptr, heads_k, heads_v, dim_v, BV)
    rk = tl.arange(0, BK)
    km = rk < dim_k
    load_h0, store_ht, h0_base, ht_base = _state_ends(
        h0_ptr, ht_ptr, slot_ptr, has_h0_ptr, seq, hv, stride_state, dim_k, dim_v, h0_mode, ht_mode, use_has_h0)
    state_off = _state_offsets(rk, rv, dim_k, dim_v, V_FIRST)
    state_mask = km[:, None] & vm[None, :]
    S = tl.zeros([BK, BV], dtype=tl.float32)
    if load_h0:
        S = tl.load(h0_base + state_off, mask=state_mask, other=0.0).to(tl.float32)
    rt = tl.arange(0, BT)
    for t0 in range(bos, eos, BT):
        tok = t0 + rt
        tm = tok < eos
        hrow = tok * heads_v + hv
        G = tl.load(gcum_ptr + hrow, mask=tm, other=0.0)
        g_last = tl.load(gcum_ptr + (tl.minimum(t0 + BT, eos) - 1) * heads_v + hv)
        w = tl.load(w_ptr + hrow[:, None] * dim_k + rk[None, :], mask=tm[:, None] & km[None, :], other=0.0).to(op_t)
        S_op = S.to(op_t)
        tl.store(_chunk_state_rows(hs_ptr, t0, seq, hv, rk, rv, heads_v, dim_k, dim_v, BT), S_op, mask=state_mask)
        ws = tl.dot(w, S_op, input_precision=DOT)
        u = tl.load(u_ptr + hrow[:, None] * dim_v + rv[None, :], mask=tm[:, None] & vm[None, :], other=0.0)
        v_new = u.to(tl.float32) - ws
        tl.store(vnew_ptr + hrow[:, None] * dim_v + rv[None, :], v_new.to(vnew_ptr.dtype.element_ty), mask=tm[:, None] & vm[None, :])
        k = _key_rows(k_ptr, t0, eos, h, rt, rk, km, stride_k, dim_k).to(op_t)
        v_decayed = (v_new * tl.exp(g_last - G)[:, None]).to(op_t)
        S = S * tl.exp(g_last) + tl.dot(tl.trans(k), v_decayed, input_precision=DOT)
    if store_ht:
        tl.store(ht_base + state_off, S.to(ht_ptr.dtype.element_ty), mask=state_mask)


@triton.jit
def _chunk_state_output_kernel(
    q_ptr, k_ptr, v_ptr, tinv_ptr, aqk_ptr, gcum_ptr, o_ptr,
    h0_ptr, ht_ptr, slot_ptr, has_h0_ptr, cu_ptr, scratch_ptr, hs_ptr, vnew_ptr,
    stride_q, stride_k, stride_v, stride_state, scale,
    heads_k, heads_v, dim_k, dim_v,
    h0_mode, ht_mode, use_has_h0,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, SPLIT_K: tl.constexpr, V_FIRST: tl.constexpr,
    DOT: tl.constexpr, NATIVE: tl.constexpr, PREFETCH: tl.constexpr, HALVES: tl.constexpr,
    PARALLEL_OUT: tl.constexpr,
):  # fmt: skip
    """One (value block, sequence, value head): walks the sequence's chunks in order, carrying the state.

    Per chunk: v' = Ti (v - exp(G) (k S)), o = scale exp(G) (q S) + Aqk v', S <- exp(G_last) S + k^T (exp(G_last - G)
    v'); the decays scale the [BT, BV] products, not the [BT, BK] operands, so q and k go from memory to the dots.
    SPLIT_K == BK: the fp32 state tile lives in registers (tensor-core dots). SPLIT_K < BK (FMA dots: sm_75
    without TensorCore75, where a product over a 128-deep axis holds whole operand rows per thread and spills): the
    state lives in a per-program fp32 scratch (L1/L2 resident) and the products with it run over SPLIT_K-row slices.
    NATIVE: products take operands in the input dtype with fp32 accumulation (what tensor cores take; the state is
    rounded only as an operand and stays fp32 between chunks). In the interpreter, fp16 only (its bf16 dot is broken).
    PREFETCH (register state only): the next chunk's keys (k, G) are loaded into registers while this one computes.
    The chunks' chain of products is serial and starts with k S, and sm_75 has no asynchronous copy to hide the
    load's latency otherwise; the rest of a chunk's inputs are first used later in the chain (and more registers
    spill on sm_75: the whole chunk prefetched spills 416 bytes at K=V=128, 8 warps).
    Without PREFETCH the loads keep their places next to their first use: compiled for sm_90 (wgmma), Triton 3.6
    computes this loop wrongly once v, Ti and Aqk are read before the first products or k is loaded ahead (H200,
    2026-12-02: relative errors near 1 at K=V=128), so the sm_80+ form does not prefetch.
    HALVES (with PREFETCH): the state tile lives as two [BK/2, BV] row halves and each product with it takes one
    half at a time. Every warp holds a product's whole right-hand operand, so the [BK, BV] state operand alone cost
    each thread 64 registers at 4 warps; with halves, v and Ti loaded at their use and the next keys loaded after
    k S, 4 warps compile for sm_75 without spills and with 28 KB of shared memory: two programs per Turing SM.
    PARALLEL_OUT (register state only): the walk leaves out q S and the output; it writes each chunk's starting
    state (rounded to the operand dtype, as q S takes it) to hs and v' to vnew, and _chunk_output_kernel forms the
    outputs for all chunks at once. That shortens the serial chain by two of its five products for 36 KB more
    memory traffic per token at TP2 (see prefill_blocks).
    """
    op_t = q_ptr.dtype.element_ty if NATIVE else tl.float32
    seq, hv, h, bos, eos, rv, vm = _walk_program(cu_ptr, heads_k, heads_v, dim_v, BV)

    load_h0, store_ht, h0_base, ht_base = _state_ends(
        h0_ptr, ht_ptr, slot_ptr, has_h0_ptr, seq, hv, stride_state, dim_k, dim_v, h0_mode, ht_mode, use_has_h0)
    rt = tl.arange(0, BT)
    causal = rt[:, None] >= rt[None, :]
    if HALVES:
        HALF: tl.constexpr = BK // 2
        rk0 = tl.arange(0, HALF)
        rk1 = HALF + rk0
        km0 = rk0 < dim_k
        km1 = rk1 < dim_k
        S0 = tl.zeros([HALF, BV], dtype=tl.float32)
        S1 = tl.zeros([HALF, BV], dtype=tl.float32)
        if load_h0:
            S0 = _load_state_rows(h0_base, rk0, km0, rv, vm, dim_k, dim_v, V_FIRST)
            S1 = _load_state_rows(h0_base, rk1, km1, rv, vm, dim_k, dim_v, V_FIRST)
        G_n, gl_n, k0_n = _chunk_keys(k_ptr, gcum_ptr, bos, eos, h, hv, rt, rk0, km0, stride_k, heads_v, dim_k, BT)
        k1_n = _key_rows(k_ptr, bos, eos, h, rt, rk1, km1, stride_k, dim_k)
        for t0 in range(bos, eos, BT):
            tok = t0 + rt
            tm = tok < eos
            hrow = tok * heads_v + hv
            G, g_last, k0, k1 = G_n, gl_n, k0_n.to(op_t), k1_n.to(op_t)
            S_op = S0.to(op_t)  # one half's operand at a time
            if PARALLEL_OUT:
                tl.store(_chunk_state_rows(hs_ptr, t0, seq, hv, rk0, rv, heads_v, dim_k, dim_v, BT), S_op, mask=km0[:, None] & vm[None, :])
            else:
                q = _key_rows(q_ptr, t0, eos, h, rt, rk0, km0, stride_q, dim_k).to(op_t)
                qs = tl.dot(q, S_op, input_precision=DOT)
            ks = tl.dot(k0, S_op, input_precision=DOT)
            S_op = S1.to(op_t)
            if PARALLEL_OUT:
                tl.store(_chunk_state_rows(hs_ptr, t0, seq, hv, rk1, rv, heads_v, dim_k, dim_v, BT), S_op, mask=km1[:, None] & vm[None, :])
            else:
                q = _key_rows(q_ptr, t0, eos, h, rt, rk1, km1, stride_q, dim_k).to(op_t)
                qs = tl.dot(q, S_op, qs, input_precision=DOT)
            ks = tl.dot(k1, S_op, ks, input_precision=DOT)
            v = tl.load(v_ptr + tok[:, None] * stride_v + hv * dim_v + rv[None, :], mask=tm[:, None] & vm[None, :], other=0.0)
            ti = tl.load(tinv_ptr + hrow[:, None] * BT + rt[None, :], mask=tm[:, None] & causal, other=0.0)
            e_g = tl.exp(G)
            # the next chunk's keys, set off after k S: loaded at the top they are live through both halves' products
            G_n, gl_n, k0_n = _chunk_keys(k_ptr, gcum_ptr, t0 + BT, eos, h, hv, rt, rk0, km0, stride_k, heads_v, dim_k, BT)
            k1_n = _key_rows(k_ptr, t0 + BT, eos, h, rt, rk1, km1, stride_k, dim_k)
            residual = (v.to(tl.float32) - e_g[:, None] * ks).to(op_t)
            v_new = tl.dot(ti.to(op_t), residual, input_precision=DOT)
            if PARALLEL_OUT:
                tl.store(vnew_ptr + hrow[:, None] * dim_v + rv[None, :], v_new.to(vnew_ptr.dtype.element_ty), mask=tm[:, None] & vm[None, :])
            else:
                _store_output(o_ptr, aqk_ptr, qs, v_new, e_g * scale, hrow, rt, tm, causal, rv, vm, dim_v, op_t, BT, DOT)
            v_decayed = (v_new * tl.exp(g_last - G)[:, None]).to(op_t)
            S0 = S0 * tl.exp(g_last) + tl.dot(tl.trans(k0), v_decayed, input_precision=DOT)
            S1 = S1 * tl.exp(g_last) + tl.dot(tl.trans(k1), v_decayed, input_precision=DOT)
        if store_ht:
            _store_state_rows(ht_base, S0, rk0, km0, rv, vm, dim_k, dim_v, V_FIRST)
            _store_state_rows(ht_base, S1, rk1, km1, rv, vm, dim_k, dim_v, V_FIRST)
    elif SPLIT_K == BK:
        rk = tl.arange(0, BK)
        km = rk < dim_k
        state_off = _state_offsets(rk, rv, dim_k, dim_v, V_FIRST)
        state_mask = km[:, None] & vm[None, :]
        S = tl.zeros([BK, BV], dtype=tl.float32)
        if load_h0:
            S = tl.load(h0_base + state_off, mask=state_mask, other=0.0).to(tl.float32)
        if PREFETCH:
            G_n, gl_n, k_n = _chunk_keys(k_ptr, gcum_ptr, bos, eos, h, hv, rt, rk, km, stride_k, heads_v, dim_k, BT)
        for t0 in range(bos, eos, BT):
            tok = t0 + rt
            tm = tok < eos
            hrow = tok * heads_v + hv
            if PREFETCH:  # keys loaded during the last chunk; the next chunk's keys and this one's rest set off now
                G, g_last, k = G_n, gl_n, k_n
                G_n, gl_n, k_n = _chunk_keys(k_ptr, gcum_ptr, t0 + BT, eos, h, hv, rt, rk, km, stride_k, heads_v, dim_k, BT)
                if not PARALLEL_OUT:
                    q = _key_rows(q_ptr, t0, eos, h, rt, rk, km, stride_q, dim_k)
                v, ti = _chunk_values(v_ptr, tinv_ptr, t0, eos, hv, rt, rv, vm, causal, stride_v, heads_v, dim_v, BT)
                k = k.to(op_t)
                if not PARALLEL_OUT:
                    q = q.to(op_t)
            else:
                G = tl.load(gcum_ptr + hrow, mask=tm, other=0.0)
                g_last = tl.load(gcum_ptr + (tl.minimum(t0 + BT, eos) - 1) * heads_v + hv)
                k = _key_rows(k_ptr, t0, eos, h, rt, rk, km, stride_k, dim_k).to(op_t)
                if not PARALLEL_OUT:
                    q = _key_rows(q_ptr, t0, eos, h, rt, rk, km, stride_q, dim_k).to(op_t)
            S_op = S.to(op_t)
            if PARALLEL_OUT:
                tl.store(_chunk_state_rows(hs_ptr, t0, seq, hv, rk, rv, heads_v, dim_k, dim_v, BT), S_op, mask=km[:, None] & vm[None, :])
                ks = tl.dot(k, S_op, input_precision=DOT)
            elif PREFETCH:
                # q S first: Triton stages dot operands in shared memory from their loads on, and in this order
                # q's buffer is free again before the chain's operands need theirs (sm_75, K=V=128: 32 KB instead
                # of 56 with Aqk loaded late too)
                qs = tl.dot(q, S_op, input_precision=DOT)
                ks = tl.dot(k, S_op, input_precision=DOT)
            else:
                ks = tl.dot(k, S_op, input_precision=DOT)
                qs = tl.dot(q, S_op, input_precision=DOT)
            if not PREFETCH:
                v = tl.load(v_ptr + tok[:, None] * stride_v + hv * dim_v + rv[None, :], mask=tm[:, None] & vm[None, :], other=0.0)
            e_g = tl.exp(G)
            residual = (v.to(tl.float32) - e_g[:, None] * ks).to(op_t)
            if not PREFETCH:
                ti = tl.load(tinv_ptr + hrow[:, None] * BT + rt[None, :], mask=tm[:, None] & causal, other=0.0)
            v_new = tl.dot(ti.to(op_t), residual, input_precision=DOT)
            if PARALLEL_OUT:
                tl.store(vnew_ptr + hrow[:, None] * dim_v + rv[None, :], v_new.to(vnew_ptr.dtype.element_ty), mask=tm[:, None] & vm[None, :])
            else:
                _store_output(o_ptr, aqk_ptr, qs, v_new, e_g * scale, hrow, rt, tm, causal, rv, vm, dim_v, op_t, BT, DOT)
            v_decayed = (v_new * tl.exp(g_last - G)[:, None]).to(op_t)
            S = S * tl.exp(g_last) + tl.dot(tl.trans(k), v_decayed, input_precision=DOT)
        if store_ht:
            tl.store(ht_base + state_off, S.to(ht_ptr.dtype.element_ty), mask=state_mask)
    else:
        rs = tl.arange(0, SPLIT_K)
        scratch = scratch_ptr + (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)).to(tl.int64) * (BK * BV)
        scratch_off = rs[:, None] * BV + tl.arange(0, BV)[None, :]
        for kb in tl.static_range(0, BK, SPLIT_K):
            rk = kb + rs
            S = tl.zeros([SPLIT_K, BV], dtype=tl.float32)
            if load_h0:
                mask = (rk < dim_k)[:, None] & vm[None, :]
                S = tl.load(h0_base + _state_offsets(rk, rv, dim_k, dim_v, V_FIRST), mask=mask, other=0.0).to(tl.float32)
            tl.store(scratch + kb * BV + scratch_off, S)
        tl.debug_barrier()
        for t0 in range(bos, eos, BT):
            tok = t0 + rt
            tm = tok < eos
            hrow = tok * heads_v + hv
            G = tl.load(gcum_ptr + hrow, mask=tm, other=0.0)
            g_last = tl.load(gcum_ptr + (tl.minimum(t0 + BT, eos) - 1) * heads_v + hv)
            ks = tl.zeros([BT, BV], dtype=tl.float32)
            qs = tl.zeros([BT, BV], dtype=tl.float32)
            for kb in tl.static_range(0, BK, SPLIT_K):
                rk = kb + rs
                m = tm[:, None] & (rk < dim_k)[None, :]
                S_op = tl.load(scratch + kb * BV + scratch_off).to(op_t)
                k = tl.load(k_ptr + tok[:, None] * stride_k + h * dim_k + rk[None, :], mask=m, other=0.0)
                q = tl.load(q_ptr + tok[:, None] * stride_q + h * dim_k + rk[None, :], mask=m, other=0.0)
                ks += tl.dot(k.to(op_t), S_op, input_precision=DOT)
                qs += tl.dot(q.to(op_t), S_op, input_precision=DOT)
            v = tl.load(v_ptr + tok[:, None] * stride_v + hv * dim_v + rv[None, :], mask=tm[:, None] & vm[None, :], other=0.0)
            e_g = tl.exp(G)
            residual = (v.to(tl.float32) - e_g[:, None] * ks).to(op_t)
            ti = tl.load(tinv_ptr + hrow[:, None] * BT + rt[None, :], mask=tm[:, None] & causal, other=0.0)
            v_new = tl.dot(ti.to(op_t), residual, input_precision=DOT)
            _store_output(o_ptr, aqk_ptr, qs, v_new, e_g * scale, hrow, rt, tm, causal, rv, vm, dim_v, op_t, BT, DOT)
            tl.debug_barrier()  # every thread has read the old state before any thread overwrites it
            v_decayed = (v_new * tl.exp(g_last - G)[:, None]).to(op_t)
            for kb in tl.static_range(0, BK, SPLIT_K):
                rk = kb + rs
                k = tl.load(k_ptr + tok[:, None] * stride_k + h * dim_k + rk[None, :], mask=tm[:, None] & (rk < dim_k)[None, :], other=0.0)
                S = tl.load(scratch + kb * BV + scratch_off) * tl.exp(g_last)
                S += tl.dot(tl.trans(k.to(op_t)), v_decayed, input_precision=DOT)
                tl.store(scratch + kb * BV + scratch_off, S)
            tl.debug_barrier()
        if store_ht:
            for kb in tl.static_range(0, BK, SPLIT_K):
                rk = kb + rs
                mask = (rk < dim_k)[:, None] & vm[None, :]
                S = tl.load(scratch + kb * BV + scratch_off)
                tl.store(ht_base + _state_offsets(rk, rv, dim_k, dim_v, V_FIRST), S.to(ht_ptr.dtype.element_ty), mask=mask)


@dataclass(frozen=True)
class PrefillBlocks:
    """Launch shapes of the prefill kernels: kernel 1's key-column block and warps; kernel 2's state tile (BK x BV),
    the row slice its products take the state in (SPLIT_K < BK: through scratch) and warps; whether kernel 3 forms
    the outputs, and its value block and warps; whether w and u are formed ahead of the walk, and that kernel's
    warps."""

    bkc: int
    warps1: int
    bk: int
    bv: int
    split_k: int
    warps2: int
    prefetch: bool = False  # kernel 2 loads the next chunk's keys during this one (register state only)
    halves: bool = False  # kernel 2's state in two row halves (with prefetch: 4 warps fit sm_75; see the kernel)
    parallel_output: bool = False  # outputs in a third kernel over all chunks at once (register state only)
    bv3: int = 64  # that kernel's value block (at most the value head dim's block) and warps
    warps3: int = 4
    wu_ahead: bool = False  # w and u formed by a kernel of their own; the walk then chains two products per chunk
    warps_wu: int = 4  # that kernel's warps

    def __post_init__(self) -> None:
        if self.wu_ahead and not (self.parallel_output and not self.prefetch and not self.halves):
            raise ValueError(f"the walk over w and u formed ahead leaves the outputs to the third kernel and neither "
                             f"prefetches nor keeps its state in halves: it needs parallel_output=True, "
                             f"prefetch=False, halves=False, got {self}")
        if self.prefetch and self.split_k != self.bk:
            raise ValueError(f"kernel 2 prefetches only with the state in registers (split_k == bk), got {self}")
        if self.parallel_output and self.split_k != self.bk:
            raise ValueError(f"kernel 2 leaves the outputs to a third kernel only with the state in registers "
                             f"(split_k == bk), got {self}")
        if self.halves and not (self.prefetch and self.bk >= 32):
            # each half's products take at least 16 key rows, tl.dot's least
            raise ValueError(f"kernel 2 keeps its state in halves only in its prefetching form with bk >= 32, got {self}")


def prefill_blocks(dim_k: int, dim_v: int, form: str) -> PrefillBlocks:
    """The launch shapes for head dims and a form (_common.FORMS): on sm_75 the ones sm75_fit finds free of spills.

    Kernel 1 takes 16 key columns at a time in every form: its ten 16x16 accumulators, then the inverse's blocks,
    spill at 32 (FMA: 4 warps and masked head dims; Turing MMA at 1 warp, sm_80+ at any warp count tried). Its
    16x16 products are small for more than one warp. Before kernel 1 was split in two parts (2026-12-03), on the
    Turing proxy (H200, 2026-12-02, TP2 1x8192) it took 142 us at 1 warp, 242 at 2 and 457 at 4, but spilled 88
    bytes on sm_75 at 1 warp, so the Turing MMA form ran it at 2; natively at 1 warp it took 97 against 305 us at 4
    (4x8192: 390 against 1228), spilling on sm_90 and sm_80 (160-296 and 84-168 bytes, by compile settings). Split, it compiles at 1 warp without
    spills for sm_75 (185 registers), sm_80 (198) and sm_90 (200), and every form with tensor cores runs it there
    (Turing proxy on 72 SMs, 2026-12-03, 1x8192: 252 us at 1 warp, 456 at 2, 940 at 4).
    Kernel 2 keeps the fp32 state tile in registers with tensor cores (BV 32: enough programs for one long
    sequence); on sm_75 it loads the next chunk's keys ahead (prefetch; Turing proxy, 2026-12-02, TP2 1x8192: 518
    against 596 us at 8 warps) and runs at 4 warps, two programs per Turing SM where 8 warps hold one. With the
    outputs in the walk 4 warps fit sm_75 without spills only with the state in two row halves (halves): on a 2080
    Ti's SM count (the proxy on 72 of the H200's SMs, 2026-12-03, whole prefill) that took 1.02 / 3.98 / 3.31 ms
    against 1.30 / 5.04 / 4.04 at 8 warps (1x8192 / 1x32768 / 4x8192), the same bits. With the outputs in kernel 3
    the whole state fits 4 warps and times level with the halves (below). On sm_80+ kernel 2 runs at 4 warps
    without prefetch (launchable).
    Wherever the state is in registers the outputs come from kernel 3 (parallel_output): in the sweep of 2026-12-03
    (fifth session, H200, TP2, kernel GPU time per call, the same output bits) that took the Turing MMA form on 72 SMs
    from 1021 to 834 us at 1x8192 and from 3329 to 2836 at 4x8192, on all 132 from 861 / 3347 / 2140 to 590 / 2256 /
    1812 (1x8192 / 1x32768 / 4x8192; with the state in halves, which the whole state matched: 836 / 2825 on 72 SMs
    with kernel 3 at 64 columns), and natively from 541 / 2011 / 1613 to 505 / 1874 / 1398. Its value block of
    128 beat 64 and 32 everywhere; 8 warps edged out 4 on sm_75 (proxy), 4 won natively. The cost is memory: the
    chunk states and v' add 36 KB per token at TP2, about 0.5 ms per 8192 tokens at a 2080 Ti's 616 GB/s, which the
    proxy's 4.8 TB/s hide (docs/gdncore.md, the floors table).
    On sm_80+ w and u are formed ahead (wu_ahead) and the walk chains two products per chunk: natively on the H200
    (2026-12-03, sixth session, kernel GPU time per call) 429 / 1562 / 1410 us against 506 / 1866 / 1391 with the
    walk over Ti, level at four sequences and ahead at one. Its kernel at 4 warps beat 2 and 8; the walk's value
    block of 32 beat 16 and 64; at 2 warps (mma.sync) the walk over w and u took 20 times as long, so the launch
    that falls back to 2 warps (unaligned key rows on sm_90) walks over Ti.
    At BK 256 on sm_75 the state goes through scratch in 128-row slices with 16-wide value blocks, where registers
    would not hold it. Where tl.dot is FMA (sm_75 without TensorCore75, the interpreter), kernel 2 keeps the state
    in scratch in 32-row slices with 16-wide value blocks.
    """
    bk = head_block(dim_k)
    bv = min(32, head_block(dim_v))
    # the output kernel: 128-wide value blocks read each chunk's q once per value head (64 at K 256, whose
    # operands would take 96 KB of shared memory)
    bv3 = min(128 if bk <= 128 else 64, head_block(dim_v))
    if form == FMA:
        return PrefillBlocks(SUB, 8, bk, min(16, bv), min(32, bk), 8)
    if form == TURING_MMA:
        if bk > 128:
            return PrefillBlocks(SUB, 1, bk, 16, 128, 8)
        return PrefillBlocks(SUB, 1, bk, bv, bk, 4, prefetch=True, parallel_output=True, bv3=bv3, warps3=8)
    return PrefillBlocks(SUB, 1, bk, bv, bk, MAX_WGMMA_WARPS2, parallel_output=True, bv3=bv3, warps3=4, wu_ahead=True)


# Compiled for sm_90, Triton 3.6's code for kernel 2 (H200, compute-sanitizer, 2026-12-02): at 8 warps (two
# warpgroups sharing its 64-row wgmma products) it reads shared memory out of range; at 4 it is correct only when
# its key rows are copied to shared memory asynchronously (16-byte aligned rows, loads beside their first use): with
# a head dim of 100 in fp16, or with prefetch, its products come out wrong. Below 4 warps Triton emits mma.sync
# instead of wgmma, which was right in all of those cases.
MAX_WGMMA_WARPS2 = 4
MMA_SYNC_WARPS2 = 2


def launchable(blocks: PrefillBlocks, arch: int | None, key_row_bytes: int = 0) -> bool:
    """Whether kernel 2 may run with `blocks` when compiled for `arch` (_common.compile_arch; None: interpreter)
    on key rows of `key_row_bytes` (head dim x element size). On sm_90 (see above): below 4 warps (mma.sync) as
    anywhere; on wgmma at most MAX_WGMMA_WARPS2 warps, without prefetch and on 16-byte aligned rows only."""
    if arch is None or not 90 <= arch < 100 or blocks.warps2 < 4:
        return True
    return blocks.warps2 <= MAX_WGMMA_WARPS2 and not blocks.prefetch and not key_row_bytes % 16


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
    plan: how the products run (default: what this device and compile target take, _common.dot_plan); tests pass
    one to run the tensor-core form through the interpreter. blocks: launch shapes (default: prefill_blocks for
    the plan's form); the benchmark sweeps them.
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
    plan = plan or dot_plan(q, K, V)
    arch = compile_arch(device.type, device.index)
    row_bytes = K * k.element_size()
    if blocks is None:
        blocks = prefill_blocks(K, V, plan.form)
        if not launchable(blocks, arch, row_bytes):  # sm_90, or a form meant for another GPU run there (tests)
            warps = MMA_SYNC_WARPS2 if row_bytes % 16 else min(blocks.warps2, MAX_WGMMA_WARPS2)
            # at 2 warps the walk over w and u took 20 times its 4-warp time (H200, TP2 1x8192: 9.9 ms against
            # 0.43 for the whole call); the walk over Ti keeps the speed it had there before
            blocks = replace(blocks, warps2=warps, prefetch=False, halves=False,
                             wu_ahead=blocks.wu_ahead and warps != MMA_SYNC_WARPS2)
    elif not launchable(blocks, arch, row_bytes):
        raise ValueError(f"caovan GDN: {blocks} cannot run compiled for sm_{arch}: at 4 warps or more kernel 2 "
                         f"runs on wgmma there, which takes at most {MAX_WGMMA_WARPS2} warps, no prefetch and key "
                         f"rows that are a multiple of 16 bytes (key rows of {row_bytes} bytes here); Triton 3.6's "
                         f"code reads out of range or computes wrong results otherwise. Below 4 warps (mma.sync) "
                         f"any blocks run; or leave blocks to chunk.prefill_blocks")
    _chunk_wy_kernel[(table.shape[0], 2 * HV)](
        q, k, g, beta, A_log if use_gate_in_kernel else g, dt_bias if use_gate_in_kernel else g,
        tinv, aqk, gcum, table, cu,
        stride_q, stride_k, scale, 2.0 if allow_neg_eigval else 1.0,
        H, HV, K, int(use_gate_in_kernel), int(use_beta_sigmoid_in_kernel),
        BKC=blocks.bkc, SUB=SUB, DOT=plan.precision, NATIVE=plan.native, TENSOR_CORES=plan.form != FMA,
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
        op_dtype = work_dtype if plan.native else torch.float32
        hs = torch.empty(total // CHUNK + n_seq, HV, K, V, dtype=op_dtype, device=device)
        vnew = torch.empty(total, HV, V, dtype=op_dtype, device=device)
    if blocks.wu_ahead:
        w = torch.empty(total, HV, K, dtype=hs.dtype, device=device)
        u = torch.empty(total, HV, V, dtype=hs.dtype, device=device)
        _chunk_wu_kernel[(table.shape[0], HV)](
            k, v, tinv, gcum, w, u, table, cu,
            stride_k, stride_v, H, HV, K, V,
            BT=CHUNK, BC=min(64, head_block(max(K, V))), DOT=plan.precision, NATIVE=plan.native,
            num_warps=blocks.warps_wu,
        )  # fmt: skip
        _chunk_state_wu_kernel[grid](
            k, w, u, gcum,
            h0, ht, slots, has_init, cu, hs, vnew,
            stride_k, stride_state, H, HV, K, V,
            h0_mode, ht_mode, int(has_initial_state is not None),
            BT=CHUNK, BK=blocks.bk, BV=blocks.bv, V_FIRST=state_v_first, DOT=plan.precision, NATIVE=plan.native,
            num_warps=blocks.warps2,
        )  # fmt: skip
    else:
        _chunk_state_output_kernel[grid](
            q, k, v, tinv, aqk, gcum, o,
            h0, ht, slots, has_init, cu, scratch, hs, vnew,
            stride_q, stride_k, stride_v, stride_state, scale,
            H, HV, K, V,
            h0_mode, ht_mode, int(has_initial_state is not None),
            BT=CHUNK, BK=blocks.bk, BV=blocks.bv, SPLIT_K=blocks.split_k, V_FIRST=state_v_first, DOT=plan.precision,
            NATIVE=plan.native, PREFETCH=blocks.prefetch, HALVES=blocks.halves, PARALLEL_OUT=blocks.parallel_output,
            num_warps=blocks.warps2,
        )  # fmt: skip
    if blocks.parallel_output:
        bv3 = min(blocks.bv3, head_block(V))
        _chunk_output_kernel[(table.shape[0], HV, triton.cdiv(V, bv3))](
            q, vnew, hs, aqk, gcum, o, table, cu,
            stride_q, scale, H, HV, K, V,
            BT=CHUNK, BK=blocks.bk, BV=bv3, DOT=plan.precision, NATIVE=plan.native, num_warps=blocks.warps3,
        )  # fmt: skip
    return o, final
