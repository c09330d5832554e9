"""Split-KV attention for short query lengths (the MTP verify: 1 + k query tokens per sequence) over vLLM's paged KV
cache, in two kernels:

1. `_segment_kernel`, grid (sequence, KV head, segment): the query rows of one sequence for every query head that
   shares the KV head (query tokens x group, one dot tile), walked over one segment of the context with an online
   softmax; it writes its unnormalised output, its running maximum and its sum.
2. `_merge_kernel`, grid (sequence, KV head, row): rescales the segments to one maximum and writes the normalised
   output row.

K and V are read once per KV head (vLLM's launch reads them once per block of query tokens). Both dots take the
cache's dtype as operands (fp16 on Turing), so TensorCore75 puts them on Turing's tensor cores. The oracle is
reference.paged_attention; plan.py decides the launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from caovan_kernels import tensorcore75
from caovan_kernels.gdn._common import compile_arch, interpreting

from .plan import MAX_HEAD_DIM, SplitLaunch, next_pow2

_LOG2E = 1.4426950408889634


@triton.jit
def _segment_kernel(
    q_ptr, k_ptr, v_ptr, block_table_ptr, seq_lens_ptr, cu_q_ptr, o_part_ptr, m_part_ptr, l_part_ptr,
    scale_log2,
    stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh, stride_kd,
    stride_vb, stride_vs, stride_vh, stride_vd,
    stride_bt,
    stride_op, stride_or,
    stride_mp,
    HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr, GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    ROWS: tl.constexpr, TILE: tl.constexpr, SPLITS: tl.constexpr, MIN_TILES: tl.constexpr, NATIVE: tl.constexpr,
):  # fmt: skip
    # NATIVE: the dots take the cache's dtype as operands (fp32 accumulation); else fp32 operands (the interpreter's
    # bf16 dot is not exact).
    op_t = k_ptr.dtype.element_ty if NATIVE else tl.float32
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    segment = tl.program_id(2)
    kv_heads = tl.num_programs(1)
    part = (seq * kv_heads + kv_head) * SPLITS + segment

    q_start = tl.load(cu_q_ptr + seq)
    query_len = tl.load(cu_q_ptr + seq + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + seq)
    # Segments cover whole tiles, at least MIN_TILES each, so a short context leaves the last segments empty.
    tiles = tl.cdiv(seq_len, TILE)
    per_segment = tl.maximum(tl.cdiv(tiles, SPLITS), MIN_TILES)
    first_tile = segment * per_segment
    last_tile = tl.minimum(first_tile + per_segment, tiles)

    rows = tl.arange(0, ROWS)
    token = rows // GROUP  # row r: query token r // GROUP of query head kv_head * GROUP + r % GROUP
    head = kv_head * GROUP + rows % GROUP
    row_valid = token < query_len
    # Query token i sits at position seq_len - query_len + i and sees keys up to there.
    last_key = seq_len - query_len + token
    dims = tl.arange(0, HEAD_PAD)
    dim_valid = dims < HEAD_DIM

    m_i = tl.full([ROWS], float("-inf"), tl.float32)
    l_i = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, HEAD_PAD], tl.float32)
    if first_tile < last_tile:
        q = tl.load(
            q_ptr + (q_start + token)[:, None].to(tl.int64) * stride_qt + head[:, None] * stride_qh + dims[None, :],
            mask=row_valid[:, None] & dim_valid[None, :], other=0.0,
        ).to(op_t)  # fmt: skip
        offsets = tl.arange(0, TILE)
        for t in range(first_tile, last_tile):
            keys = t * TILE + offsets
            key_valid = keys < seq_len
            # int64: a large cache holds more than 2**31 elements
            block = tl.load(block_table_ptr + seq.to(tl.int64) * stride_bt + keys // BLOCK_SIZE, mask=key_valid,
                            other=0).to(tl.int64)
            slot = keys % BLOCK_SIZE
            k = tl.load(
                k_ptr + block[None, :] * stride_kb + slot[None, :] * stride_ks + kv_head * stride_kh
                + dims[:, None] * stride_kd,
                mask=dim_valid[:, None] & key_valid[None, :], other=0.0,
            ).to(op_t)  # [HEAD_PAD, TILE]  # fmt: skip
            s = tl.dot(q, k) * scale_log2
            visible = (keys[None, :] <= last_key[:, None]) & key_valid[None, :]
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # A row that has seen no visible key yet keeps -inf; subtracting 0 there keeps exp2 at 0, not NaN.
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_safe)
            p = tl.exp2(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(
                v_ptr + block[:, None] * stride_vb + slot[:, None] * stride_vs + kv_head * stride_vh
                + dims[None, :] * stride_vd,
                mask=key_valid[:, None] & dim_valid[None, :], other=0.0,
            ).to(op_t)  # [TILE, HEAD_PAD]  # fmt: skip
            acc = acc * alpha[:, None] + tl.dot(p.to(op_t), v)
            m_i = m_new
        tl.store(o_part_ptr + part.to(tl.int64) * stride_op + rows[:, None] * stride_or + dims[None, :], acc,
                 mask=row_valid[:, None] & dim_valid[None, :])
    # An empty segment writes only its statistics (-inf, 0): the merge then skips its output rows unread.
    tl.store(m_part_ptr + part.to(tl.int64) * stride_mp + rows, m_i)
    tl.store(l_part_ptr + part.to(tl.int64) * stride_mp + rows, l_i)


@triton.jit
def _merge_kernel(
    out_ptr, cu_q_ptr, o_part_ptr, m_part_ptr, l_part_ptr,
    stride_ot, stride_oh,
    stride_op, stride_or,
    stride_mp,
    HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr, GROUP: tl.constexpr, SPLITS: tl.constexpr,
    SPLITS_PAD: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    row = tl.program_id(2)
    kv_heads = tl.num_programs(1)
    q_start = tl.load(cu_q_ptr + seq)
    query_len = tl.load(cu_q_ptr + seq + 1) - q_start
    token = row // GROUP
    if token < query_len:
        first = ((seq * kv_heads + kv_head) * SPLITS).to(tl.int64)
        segments = tl.arange(0, SPLITS_PAD)
        stats = first * stride_mp + segments * stride_mp + row
        in_range = segments < SPLITS
        m = tl.load(m_part_ptr + stats, mask=in_range, other=float("-inf"))
        m_max = tl.max(m, 0)
        weight = tl.where(m == float("-inf"), 0.0, tl.exp2(m - m_max))
        total = tl.sum(weight * tl.load(l_part_ptr + stats, mask=in_range, other=0.0), 0)
        dims = tl.arange(0, HEAD_PAD)
        dim_valid = dims < HEAD_DIM
        acc = tl.zeros([HEAD_PAD], tl.float32)
        for c in range(0, SPLITS, CHUNK):
            chunk = c + tl.arange(0, CHUNK)
            m_c = tl.load(m_part_ptr + first * stride_mp + chunk * stride_mp + row, mask=chunk < SPLITS,
                          other=float("-inf"))
            w_c = tl.where(m_c == float("-inf"), 0.0, tl.exp2(m_c - m_max))
            # Segments with nothing to add (empty, or every key hidden from this row) are not read.
            o = tl.load(o_part_ptr + (first + chunk)[:, None] * stride_op + row * stride_or + dims[None, :],
                        mask=(w_c > 0)[:, None] & dim_valid[None, :], other=0.0)
            acc += tl.sum(o * w_c[:, None], 0)
        head = kv_head * GROUP + row % GROUP
        # A row that saw no key (a padding request of a CUDA graph's batch: no context) gets zeros, not 0 / 0.
        result = tl.where(total > 0, acc / tl.where(total > 0, total, 1.0), 0.0)
        tl.store(out_ptr + (q_start + token).to(tl.int64) * stride_ot + head * stride_oh + dims,
                 result.to(out_ptr.dtype.element_ty), mask=dim_valid)


@dataclass(frozen=True)
class SplitWorkspace:
    """Per-segment partial results: output [programs, rows, head_dim] and statistics [programs, rows], fp32.

    Allocated once, before CUDA graphs are captured (vLLM's metadata builder does this for its own split launch),
    since a graph replays the addresses it captured."""

    output: torch.Tensor
    maximum: torch.Tensor
    total: torch.Tensor

    @classmethod
    def allocate(cls, programs: int, rows: int, head_dim: int, device: torch.device) -> SplitWorkspace:
        return cls(
            torch.empty((programs, rows, head_dim), dtype=torch.float32, device=device),
            torch.empty((programs, rows), dtype=torch.float32, device=device),
            torch.empty((programs, rows), dtype=torch.float32, device=device),
        )  # fmt: skip

    def holds(self, programs: int, rows: int, head_dim: int) -> bool:
        return (self.output.shape[0] >= programs and self.output.shape[1] >= rows
                and self.output.shape[2] == head_dim)


def tensor_cores_here(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this process's dots of `dtype` on `device` run on tensor cores, which plan.plan_launch needs to know:
    everywhere from sm_80 (and in the interpreter), on sm_75 only fp16 with TensorCore75 retargeting."""
    arch = compile_arch(device.type, device.index)
    if arch is None or arch >= 80:
        return True
    return dtype == torch.float16 and tensorcore75.retargets_fp16_dots()


class SplitKvError(ValueError):
    """The inputs are not what the split-KV kernel takes (shapes, dtypes, a workspace too small)."""


def check_inputs(q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, out: torch.Tensor) -> int:
    """Validate shapes and dtypes; returns the query heads per KV head."""
    if q.dim() != 3 or key_cache.dim() != 4 or value_cache.shape != key_cache.shape:
        raise SplitKvError(f"split-KV attention takes q [tokens, heads, dim] and caches [blocks, block_size, kv_heads,"
                           f" dim]; got q {tuple(q.shape)}, k {tuple(key_cache.shape)}, v {tuple(value_cache.shape)}")
    if out.shape != q.shape:
        raise SplitKvError(f"out {tuple(out.shape)} must have q's shape {tuple(q.shape)}")
    head_dim, q_heads, kv_heads = q.shape[2], q.shape[1], key_cache.shape[2]
    if key_cache.shape[3] != head_dim or head_dim > MAX_HEAD_DIM:
        raise SplitKvError(f"head dim {head_dim} (cache: {key_cache.shape[3]}) must match and be at most {MAX_HEAD_DIM}")
    if q_heads % kv_heads:
        raise SplitKvError(f"query heads ({q_heads}) must be a multiple of KV heads ({kv_heads})")
    if key_cache.dtype != q.dtype or value_cache.dtype != q.dtype:
        raise SplitKvError(f"q and the caches must share a dtype (quantized caches take vLLM's path); got {q.dtype}, "
                           f"{key_cache.dtype}, {value_cache.dtype}")
    if q.stride(2) != 1 or out.stride(2) != 1:
        raise SplitKvError("q and out must be contiguous in their last (head) dim")
    return q_heads // kv_heads


def split_kv_attention(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    scale: float,
    out: torch.Tensor,
    launch: SplitLaunch,
    workspace: SplitWorkspace,
    min_tiles: int,
) -> torch.Tensor:
    """Causal attention of q [tokens, q_heads, dim] (sequences packed by cu_seqlens_q, each query token one of the
    last of its sequence's seq_lens tokens) over key/value caches [blocks, block_size, kv_heads, dim] (any strides),
    into out; `launch` from plan.plan_launch, `min_tiles` the shortest segment in tiles of launch.tile."""
    group = check_inputs(q, key_cache, value_cache, out)
    batch, kv_heads, head_dim = seq_lens.shape[0], key_cache.shape[2], q.shape[2]
    if launch.rows < 16 or launch.rows & (launch.rows - 1):
        raise SplitKvError(f"rows per program ({launch.rows}) must be a power of two from 16")
    if not workspace.holds(launch.programs(batch, kv_heads), launch.rows, head_dim):
        raise SplitKvError(f"the workspace {tuple(workspace.output.shape)} is too small for {batch} sequences x "
                           f"{kv_heads} KV heads x {launch.splits} segments of {launch.rows} rows")
    head_pad = max(16, next_pow2(head_dim))
    _segment_kernel[(batch, kv_heads, launch.splits)](
        q, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q,
        workspace.output, workspace.maximum, workspace.total,
        scale * _LOG2E,
        q.stride(0), q.stride(1),
        *key_cache.stride(), *value_cache.stride(),
        block_table.stride(0),
        workspace.output.stride(0), workspace.output.stride(1),
        workspace.maximum.stride(0),
        HEAD_DIM=head_dim, HEAD_PAD=head_pad, GROUP=group, BLOCK_SIZE=key_cache.shape[1],
        ROWS=launch.rows, TILE=launch.tile, SPLITS=launch.splits, MIN_TILES=min_tiles,
        NATIVE=not (interpreting() and q.dtype == torch.bfloat16), num_warps=launch.num_warps, num_stages=launch.num_stages,
    )  # fmt: skip
    splits_pad = next_pow2(launch.splits)
    _merge_kernel[(batch, kv_heads, launch.rows)](
        out, cu_seqlens_q, workspace.output, workspace.maximum, workspace.total,
        out.stride(0), out.stride(1),
        workspace.output.stride(0), workspace.output.stride(1),
        workspace.maximum.stride(0),
        HEAD_DIM=head_dim, HEAD_PAD=head_pad, GROUP=group, SPLITS=launch.splits, SPLITS_PAD=splits_pad,
        CHUNK=min(8, splits_pad), num_warps=4,
    )  # fmt: skip
    return out
