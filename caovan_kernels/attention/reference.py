"""Plain-torch oracle for attention over vLLM's paged KV cache: the float64 reference the split-KV kernel is held to.

Each sequence's query tokens are the last `query_len` of its `seq_len` tokens (their keys and values are already in
the cache), so query token i sees keys 0 .. seq_len - query_len + i: causal attention as vLLM's decoder runs it.
"""

from __future__ import annotations

import torch


def gather_sequence(cache: torch.Tensor, block_table_row: torch.Tensor, seq_len: int) -> torch.Tensor:
    """One sequence's keys (or values) in token order, [seq_len, kv_heads, head_dim], from a cache laid out
    [blocks, block_size, kv_heads, head_dim] (any strides)."""
    block_size = cache.shape[1]
    tokens = torch.arange(seq_len, device=cache.device)
    blocks = block_table_row.long()[tokens // block_size]
    return cache[blocks, tokens % block_size]


def paged_attention(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of q [tokens, q_heads, head_dim] (sequences packed by cu_seqlens_q) over the paged cache,
    in float64; heads grouped as vLLM groups them (query head j reads KV head j // (q_heads // kv_heads))."""
    q_heads, kv_heads = q.shape[1], key_cache.shape[2]
    group = q_heads // kv_heads
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    for b in range(seq_lens.numel()):
        start, end = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        seq_len, query_len = int(seq_lens[b]), end - start
        if query_len == 0:
            continue
        k = gather_sequence(key_cache, block_table[b], seq_len).double().repeat_interleave(group, dim=1)
        v = gather_sequence(value_cache, block_table[b], seq_len).double().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[start:end].double(), k) * scale
        positions = seq_len - query_len + torch.arange(query_len, device=q.device)
        visible = torch.arange(seq_len, device=q.device)[None, :] <= positions[:, None]
        scores = scores.masked_fill(~visible, float("-inf"))
        out[start:end] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)
    return out
