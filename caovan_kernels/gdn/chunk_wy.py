"""Prefill stage 1: the chunk's WY matrices, kernel 1 (and, on sm_80+, w and u formed ahead of the walk).

Per 64-token chunk, with cumulative log decays G_i (chunk_gates), A_ij = beta_i exp(G_i - G_j) k_i.k_j (i > j) and
the inverse with the write strengths folded into its columns, Ti = (I + A)^-1 diag(beta), kernel 1 writes Ti, G and
Aqk = tril(exp(G_i - G_j) q_i.k_j) scale for the walk (chunk_h) and the outputs (chunk_o). It works in 16-row
sub-blocks: it inverts the four diagonal 16x16 blocks of I + A by substitution and forms the six blocks below them
by block forward substitution; Aqk comes from a program of its own. The WU_AHEAD form's kernel forms the classic WY
form's w = Ti exp(G) k and u = Ti v for every chunk at once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from caovan_kernels.gdn._tiles import _chunk_bounds, _load_rows, _store_rows
from caovan_kernels.gdn.chunk_gates import _log_decays, _write_strengths


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
    NATIVE: the k k^T and q k^T products take the input dtype (see chunk_h). TENSOR_CORES: the inverse's block
    products do too; otherwise they multiply fp32 (FMA dots, where fp32 operands cost nothing extra and keep the
    inverse's digits)."""
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

    G0, G1, G2, G3 = _log_decays(g_ptr, A_log_ptr, dt_bias_ptr, t0, t1, t2, t3, m0, m1, m2, m3, hv, heads_v, raw_gate)
    off_k = h * dim_k
    if part == 1:
        _chunk_aqk(q_ptr, k_ptr, aqk_ptr, t0, t1, t2, t3, m0, m1, m2, m3, G0, G1, G2, G3, stride_q, stride_k, off_k,
                   hv * 4 * SUB, heads_v * 4 * SUB, scale, dim_k, op_t, BKC, SUB, DOT)
        return
    tl.store(gcum_ptr + t0 * heads_v + hv, G0, mask=m0)
    tl.store(gcum_ptr + t1 * heads_v + hv, G1, mask=m1)
    tl.store(gcum_ptr + t2 * heads_v + hv, G2, mask=m2)
    tl.store(gcum_ptr + t3 * heads_v + hv, G3, mask=m3)
    b0, b1, b2, b3 = _write_strengths(beta_ptr, t0, t1, t2, t3, m0, m1, m2, m3, hv, heads_v, raw_beta, beta_scale)

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
