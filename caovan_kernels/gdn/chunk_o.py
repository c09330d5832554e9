"""Prefill stage 3: the outputs, o = scale exp(G) (q S) + Aqk v', per chunk from the state it starts from.

Kernel 3 forms them for every chunk at once from what the walk (chunk_h) wrote: each chunk's starting state and
v'. Where the walk forms the outputs itself (FMA dots), it writes each chunk's rows with _store_output.
"""

from __future__ import annotations

import triton
import triton.language as tl

from caovan_kernels.gdn._tiles import _chunk_bounds, _chunk_state_rows, _key_rows


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
