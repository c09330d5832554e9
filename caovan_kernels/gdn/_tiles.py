"""Memory access shared by the prefill's stages: token rows of a head, the chunk table, per-chunk states.

Tensors are token-major ([tokens, heads, dim] rows with a stride per token); the chunk table lists (sequence,
chunk in sequence) per 64-token chunk, padded with negative sequences (chunk.chunk_table).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _load_rows(ptr, tok, tok_mask, stride_tok, offset, cols, col_mask):
    return tl.load(ptr + tok[:, None] * stride_tok + offset + cols[None, :], mask=tok_mask[:, None] & col_mask[None, :], other=0.0)


@triton.jit
def _store_rows(ptr, x, tok, tok_mask, stride_tok, offset, cols, col_mask):
    tl.store(ptr + tok[:, None] * stride_tok + offset + cols[None, :], x.to(ptr.dtype.element_ty), mask=tok_mask[:, None] & col_mask[None, :])


@triton.jit
def _key_rows(ptr, t0, eos, h, rt, rk, km, stride, dim_k):
    """Columns rk of key head h (q or k) for the chunk at t0; all-masked (no access) from eos on."""
    tok = t0 + rt
    return tl.load(ptr + tok[:, None] * stride + h * dim_k + rk[None, :], mask=(tok < eos)[:, None] & km[None, :], other=0.0)


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
def _chunk_state_rows(hs_ptr, t0, seq, hv, rk, rv, heads_v, dim_k, dim_v, BT: tl.constexpr):
    """Where rows rk of the state the chunk at t0 starts from live in hs ([index, HV, K, V]). The index, t0 // 64 +
    sequence, is one per chunk (a sequence's chunks start at least 64 tokens apart and after the previous
    sequence's) and below tokens // 64 + sequences."""
    base = hs_ptr + ((t0 // BT + seq) * heads_v + hv).to(tl.int64) * dim_k * dim_v
    return base + rk[:, None] * dim_v + rv[None, :]
