"""Prefill stage 2: the walk, one program per (value block, sequence, value head) carrying the state chunk by chunk.

Per chunk: v' = Ti (v - exp(G) (k S)), S <- exp(G_last) S + k^T (exp(G_last - G) v'), and, where dots are FMA, the
outputs too (chunk_o). The state stays fp32 for the whole sequence: in registers with tensor cores, else in a
per-program scratch. With w and u formed ahead (chunk_wy, sm_80+) the walk is v' = u - w S instead: two products
per chunk on the serial chain instead of three. Where the outputs come from kernel 3, the walk writes each chunk's
starting state (in the operand dtype) and v' for it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from caovan_kernels.gdn._tiles import _chunk_state_rows, _key_rows
from caovan_kernels.gdn.chunk_o import _store_output

# Where a sequence's state comes from and goes to (_state_ends; runtime ints: one compiled kernel serves them all).
STATE_NONE, STATE_PER_SEQUENCE, STATE_CACHE_SLOTS = 0, 1, 2


@triton.jit
def _state_offsets(rows_k, cols_v, dim_k, dim_v, V_FIRST: tl.constexpr):
    if V_FIRST:
        return cols_v[None, :] * dim_k + rows_k[:, None]
    return rows_k[:, None] * dim_v + cols_v[None, :]


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
    DOT: tl.constexpr, NATIVE: tl.constexpr, PREFETCH: tl.constexpr, PARALLEL_OUT: tl.constexpr,
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
    computes this loop wrongly once v, Ti and Aqk are read before the first products or k is loaded ahead (relative
    errors near 1 at K=V=128), so the sm_80+ form does not prefetch.
    PARALLEL_OUT (register state only): the walk leaves out q S and the output; it writes each chunk's starting
    state (rounded to the operand dtype, as q S takes it) to hs and v' to vnew, and _chunk_output_kernel forms the
    outputs for all chunks at once. That shortens the serial chain by two of its five products for 36 KB more
    memory traffic per token at TP2 (see plan.prefill_blocks).
    """
    op_t = q_ptr.dtype.element_ty if NATIVE else tl.float32
    seq, hv, h, bos, eos, rv, vm = _walk_program(cu_ptr, heads_k, heads_v, dim_v, BV)

    load_h0, store_ht, h0_base, ht_base = _state_ends(
        h0_ptr, ht_ptr, slot_ptr, has_h0_ptr, seq, hv, stride_state, dim_k, dim_v, h0_mode, ht_mode, use_has_h0)
    rt = tl.arange(0, BT)
    causal = rt[:, None] >= rt[None, :]
    if SPLIT_K == BK:
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
