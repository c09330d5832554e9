"""The split-KV verify attention against the float64 paged-attention reference, on random paged caches.

Caches are laid out as vLLM lays them out (blocks shuffled in the block table, K and V as strided views of one
buffer, a head dim that is not a power of two), outputs are poisoned with NaN first, and every case is checked at
contexts that leave segments empty, end mid-tile and mid-block."""

from __future__ import annotations

import pytest
import torch

from caovan_kernels.attention import plan, reference
from caovan_kernels.attention.split_kv import SplitKvError, SplitWorkspace, split_kv_attention, tensor_cores_here
from caovan_kernels.gdn.accuracy import rel_err

# Relative L2 error against float64 fed the same rounded inputs: the probabilities are rounded to the cache dtype
# for the second dot (as vLLM's kernel does) and the output once more; fp16 unit roundoff is 4.9e-4, bf16's 3.9e-3.
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def paged_case(gen, device, dtype, seq_lens, query_lens, q_heads, kv_heads, head_dim, block_size, layout):
    """Random q and a paged cache holding every sequence's keys and values, in blocks shuffled across the pool."""
    blocks_per_seq = [-(-n // block_size) for n in seq_lens]
    pool = sum(blocks_per_seq) + 3  # spare blocks full of noise that no sequence owns
    order = torch.randperm(pool, generator=gen).to(device)
    table = torch.zeros((len(seq_lens), max(blocks_per_seq)), dtype=torch.int32, device=device)
    used = 0
    for b, n in enumerate(blocks_per_seq):
        table[b, :n] = order[used:used + n].int()
        used += n
    shape = (pool, block_size, kv_heads, head_dim)
    if layout == "packed":  # vLLM 0.26: one [blocks, kv_heads, block_size, 2 * dim] buffer, K and V its halves
        kv = torch.randn((pool, kv_heads, block_size, 2 * head_dim), generator=gen).to(device, dtype)
        key_cache, value_cache = kv.transpose(1, 2).split(head_dim, dim=-1)
    else:  # vLLM 0.21: [blocks, 2, block_size, kv_heads, dim], K and V unbound along dim 1
        kv = torch.randn((pool, 2, *shape[1:]), generator=gen).to(device, dtype)
        key_cache, value_cache = kv.unbind(1)
    cu = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    q = torch.randn((int(cu[-1]), q_heads, head_dim), generator=gen).to(device, dtype)
    return q, key_cache, value_cache, table, torch.tensor(seq_lens, dtype=torch.int32, device=device), cu


def run(q, key_cache, value_cache, table, seq_lens, cu, sms):
    group = q.shape[1] // key_cache.shape[2]
    batch, kv_heads = seq_lens.numel(), key_cache.shape[2]
    max_query_len = int((cu[1:] - cu[:-1]).max())
    # the launch this process's engine would take (on the Turing FMA path: 8 warps, 16-token tiles, 32 rows at most)
    launch = plan.plan_launch(batch, kv_heads, group, max_query_len, sms, tensor_cores_here(q.device, q.dtype))
    if launch is None:
        pytest.skip(f"{max_query_len} query tokens x {group} heads take vLLM's launch on this code path")
    workspace = SplitWorkspace.allocate(launch.programs(batch, kv_heads), launch.rows, q.shape[2], q.device)
    workspace.output.fill_(float("nan"))
    workspace.maximum.fill_(float("nan"))
    workspace.total.fill_(float("nan"))
    out = torch.full_like(q, float("nan"))
    split_kv_attention(q, key_cache, value_cache, table, seq_lens, cu, q.shape[2] ** -0.5, out, launch, workspace,
                       plan.MIN_TOKENS_PER_SPLIT // launch.tile)
    return out, launch


@pytest.mark.parametrize(
    "seq_lens,query_lens,q_heads,kv_heads,head_dim,block_size,dtype,layout,sms",
    [
        # one TP2 rank of Qwen3.6-27B verifying MTP=3 drafts: 12 query heads over 2 KV heads, head_dim 256
        ([1000], [4], 12, 2, 256, 32, torch.float16, "packed", 8),
        # several sequences, different query lengths (one drafter pass, one short), blocks of 16, a 7-way split
        ([300, 77, 530], [4, 2, 3], 12, 2, 256, 16, torch.float16, "unbound", 7),
        # a head dim below a power of two, bf16, 4 query heads per KV head, a context shorter than one segment
        ([40, 257], [5, 5], 8, 2, 96, 48, torch.bfloat16, "packed", 4),
        # 64 rows per program (8 query tokens x 8 heads): the 16-token tile and 8 warps, blocks not a power of two
        ([700], [8], 8, 1, 128, 80, torch.float16, "unbound", 16),
        # a prompt no longer than the query: every key causally limited (the first query token sees one key)
        ([3], [3], 6, 1, 64, 16, torch.float16, "packed", 2),
    ],
)
def test_split_kv_matches_reference(gen, device, seq_lens, query_lens, q_heads, kv_heads, head_dim, block_size,
                                    dtype, layout, sms):
    q, key_cache, value_cache, table, lens, cu = paged_case(gen, device, dtype, seq_lens, query_lens, q_heads,
                                                            kv_heads, head_dim, block_size, layout)
    out, launch = run(q, key_cache, value_cache, table, lens, cu, sms)
    ref = reference.paged_attention(q, key_cache, value_cache, table, lens, cu, head_dim ** -0.5)
    err = rel_err(out, ref)
    print(f"split-KV {launch}: relative error {err:.2e}")
    assert err < TOL[dtype]


def test_padding_requests_of_a_graph_batch_get_zeros_and_leave_the_real_ones_alone(gen, device):
    """vLLM pads a CUDA graph's batch with requests of no context (seq_len 0): their rows see no key at all."""
    q, key_cache, value_cache, table, lens, cu = paged_case(gen, device, torch.float16, [300, 1], [4, 4], 12, 2, 256,
                                                            16, "packed")
    lens[1] = 0
    out, _ = run(q, key_cache, value_cache, table, lens, cu, 8)
    assert torch.equal(out[4:], torch.zeros_like(out[4:]))
    ref = reference.paged_attention(q[:4], key_cache, value_cache, table[:1], lens[:1], cu[:2], 256 ** -0.5)
    assert rel_err(out[:4], ref) < TOL[torch.float16]


def test_reference_matches_dense_causal_attention(gen, device):
    """The oracle itself: on one contiguous sequence it is plain causal attention over the last query rows."""
    q, key_cache, value_cache, table, lens, cu = paged_case(gen, device, torch.float32, [37], [5], 4, 2, 32, 16,
                                                            "unbound")
    got = reference.paged_attention(q, key_cache, value_cache, table, lens, cu, 0.3)
    k = reference.gather_sequence(key_cache, table[0], 37).double().repeat_interleave(2, 1)
    v = reference.gather_sequence(value_cache, table[0], 37).double().repeat_interleave(2, 1)
    full_q = torch.zeros((37, 4, 32), dtype=torch.float64, device=device)
    full_q[32:] = q.double()
    expected = torch.nn.functional.scaled_dot_product_attention(
        full_q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=0.3).transpose(0, 1)
    assert torch.allclose(got, expected[32:], atol=1e-12)


def test_bad_inputs_are_refused(device):
    q = torch.zeros((4, 12, 256), dtype=torch.float16, device=device)
    cache = torch.zeros((2, 16, 2, 256), dtype=torch.float16, device=device)
    args = (torch.zeros((1, 2), dtype=torch.int32, device=device), torch.tensor([20], dtype=torch.int32, device=device),
            torch.tensor([0, 4], dtype=torch.int32, device=device), 0.1)
    launch = plan.plan_launch(1, 2, 6, 4, 8)
    small = SplitWorkspace.allocate(1, launch.rows, 256, device)
    with pytest.raises(SplitKvError, match="workspace .* too small"):
        split_kv_attention(q, cache, cache, *args, torch.empty_like(q), launch, small, 8)
    with pytest.raises(SplitKvError, match="share a dtype"):
        split_kv_attention(q, cache.to(torch.float32), cache, *args, torch.empty_like(q), launch, small, 8)
    with pytest.raises(SplitKvError, match="multiple of KV heads"):
        split_kv_attention(q[:, :5], cache, cache, *args, torch.empty_like(q[:, :5]), launch, small, 8)
