"""vLLM's own Triton kernels, called the way vLLM calls them, on inputs built here.

For the sm_75 compile survey (lab/tensorcore75_survey.py), the Turing proxy's parity checks and the benchmarks: the
unified attention of the TRITON_ATTN backend (prefill through its 2D kernel, decode through its 3D kernel and
segment reduction, as the backend launches them) and the GDN kernels (chunked prefill, the fused decode / MTP verify
update). Both vLLM families are handled: 0.21 keeps the fla copy in `vllm.model_executor.layers.fla.ops`, newer
releases in `vllm.third_party.flash_linear_attention.ops`. The CPU build of vLLM swaps Triton for a placeholder
unless Triton has a CPU backend; `use_real_triton()` undoes that for compile-only runs.

Shapes default to Qwen3.6-27B per GPU at TP2: attention 12 query heads, 2 KV heads (GQA 6), head_dim 256; GDN
H=8, HV=24, K=V=128; fp16.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

# vLLM's TRITON_ATTN backend: 2D grid floor and the parallel softmax segments of its 3D (decode) kernel.
MIN_LAUNCH_GRID_SIZE_2D = 128
NUM_PAR_SOFTMAX_SEGMENTS = 16
# Attention block size vLLM gives Qwen3.6-27B at TP2 in fp16 without prefix caching: 16 * cdiv(mamba page, 16 *
# attention bytes per token) = 16 * cdiv(1603584, 16 * 2048) (its hybrid block-size alignment).
QWEN36_TP2_BLOCK = 784


def use_real_triton() -> None:
    """Point vllm.triton_utils at the real Triton before vLLM's kernel modules import (the CPU build disables it)."""
    import triton
    import triton.language as tl
    import triton.language.extra.libdevice as tldevice
    import vllm.triton_utils as vtu

    vtu.triton, vtu.tl, vtu.tldevice, vtu.HAS_TRITON = triton, tl, tldevice, True
    # A kernel package imported earlier in this process (vLLM's attention backend, by the plugin's own tests) bound the
    # placeholder; its modules are dropped whole so that the next import compiles their kernels with the real Triton.
    stale = {name.partition(".ops.")[0] + ".ops" for name, module in list(sys.modules.items())
             if name.startswith("vllm.") and ".ops." in name and getattr(module, "triton", triton) is not triton}
    for name in [n for n in sys.modules if any(n == p or n.startswith(p + ".") for p in stale)]:
        del sys.modules[name]


def gdn_ops() -> Any:
    for name in ("vllm.model_executor.layers.fla.ops", "vllm.third_party.flash_linear_attention.ops"):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError("this vLLM has no fla GDN kernels (looked in model_executor.layers.fla and third_party)")


def unified_attention_fn() -> Callable[..., Any]:
    return importlib.import_module("vllm.v1.attention.ops.triton_unified_attention").unified_attention


# --- attention ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionCase:
    name: str
    query_lens: tuple[int, ...]
    context_lens: tuple[int, ...]  # keys before the queries (prefix / earlier tokens)
    head_dim: int = 256
    heads_q: int = 12
    heads_kv: int = 2
    block_size: int = 16

    @property
    def kv_lens(self) -> tuple[int, ...]:
        return tuple(q + c for q, c in zip(self.query_lens, self.context_lens))


@dataclass
class AttentionInputs:
    case: AttentionCase
    q: torch.Tensor  # [tokens, heads_q, head_dim]
    kv_cache: torch.Tensor  # [blocks, 2, block_size, heads_kv, head_dim] (vLLM's TRITON_ATTN layout)
    block_table: torch.Tensor  # [seqs, max blocks] int32
    cu_seqlens_q: torch.Tensor
    seqused_k: torch.Tensor
    out: torch.Tensor


def attention_inputs(case: AttentionCase, device: str | torch.device, generator: torch.Generator,
                     dtype: torch.dtype = torch.float16) -> AttentionInputs:
    """Random queries and a paged KV cache whose blocks are scattered (a shuffled block table), as in serving."""
    bs, nkv, hd = case.block_size, case.heads_kv, case.head_dim
    blocks_per_seq = [math.ceil(n / bs) for n in case.kv_lens]
    num_blocks = sum(blocks_per_seq) + 1  # block 0 unused, like vLLM's null block
    kv = torch.randn(num_blocks, 2, bs, nkv, hd, generator=generator, dtype=torch.float32).to(dtype)
    order = torch.randperm(num_blocks - 1, generator=generator) + 1
    table = torch.zeros(len(case.kv_lens), max(blocks_per_seq), dtype=torch.int32)
    start = 0
    for i, n in enumerate(blocks_per_seq):
        table[i, :n] = order[start:start + n]
        start += n
    tokens = sum(case.query_lens)
    q = torch.randn(tokens, case.heads_q, hd, generator=generator, dtype=torch.float32).to(dtype)
    cu = torch.tensor([0, *itertools.accumulate(case.query_lens)], dtype=torch.int32)
    seqused = torch.tensor(case.kv_lens, dtype=torch.int32)
    out = torch.full_like(q, float("nan"))  # poisoned: every row must be written
    return AttentionInputs(case, *(t.to(device) for t in (q, kv, table, cu, seqused, out)))


def run_unified_attention(inputs: AttentionInputs) -> torch.Tensor:
    """One call as vLLM's TRITON_ATTN backend makes it (3D kernel + segment reduction for small decode batches)."""
    case, device = inputs.case, inputs.q.device
    seq_threshold_3d = MIN_LAUNCH_GRID_SIZE_2D // case.heads_kv
    padded = 1 << (case.head_dim - 1).bit_length()
    segments = NUM_PAR_SOFTMAX_SEGMENTS
    descale = torch.ones(1, dtype=torch.float32, device=device).expand(len(case.kv_lens), case.heads_kv)
    unified_attention_fn()(
        q=inputs.q, k=inputs.kv_cache[:, 0], v=inputs.kv_cache[:, 1], out=inputs.out,
        cu_seqlens_q=inputs.cu_seqlens_q, max_seqlen_q=max(case.query_lens), seqused_k=inputs.seqused_k,
        max_seqlen_k=max(case.kv_lens), softmax_scale=case.head_dim ** -0.5, causal=True, window_size=(-1, -1),
        block_table=inputs.block_table, softcap=0, q_descale=None, k_descale=descale, v_descale=descale,
        seq_threshold_3D=seq_threshold_3d, num_par_softmax_segments=segments,
        softmax_segm_output=torch.empty(seq_threshold_3d, case.heads_q, segments, padded, dtype=torch.float32,
                                        device=device),
        softmax_segm_max=torch.empty(seq_threshold_3d, case.heads_q, segments, dtype=torch.float32, device=device),
        softmax_segm_expsum=torch.empty(seq_threshold_3d, case.heads_q, segments, dtype=torch.float32, device=device),
    )  # fmt: skip
    return inputs.out


def attention_reference(inputs: AttentionInputs) -> torch.Tensor:
    """Causal GQA attention in fp32 over the gathered cache, per sequence (torch SDPA)."""
    case = inputs.case
    group = case.heads_q // case.heads_kv
    outs = []
    for i, (q_len, kv_len) in enumerate(zip(case.query_lens, case.kv_lens)):
        blocks = inputs.block_table[i, : math.ceil(kv_len / case.block_size)].long()
        kv = inputs.kv_cache[blocks].float()  # [n, 2, bs, nkv, hd]
        k = kv[:, 0].reshape(-1, case.heads_kv, case.head_dim)[:kv_len]
        v = kv[:, 1].reshape(-1, case.heads_kv, case.head_dim)[:kv_len]
        start = int(inputs.cu_seqlens_q[i])
        q = inputs.q[start:start + q_len].float()
        # query j sits at position kv_len - q_len + j and sees keys 0..that position
        pos_q = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]
        mask = torch.arange(kv_len, device=q.device)[None, :] <= pos_q
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.repeat_interleave(group, 1).transpose(0, 1),
            v.repeat_interleave(group, 1).transpose(0, 1), attn_mask=mask, scale=case.head_dim ** -0.5,
        )  # fmt: skip
        outs.append(o.transpose(0, 1))
    return torch.cat(outs)


def attention_cases(head_dims: Sequence[int] = (128, 256), block_sizes: Sequence[int] = (16, QWEN36_TP2_BLOCK),
                    prefill_tokens: int = 1024) -> list[AttentionCase]:
    """Prefill (two sequences, one with a cached prefix), decode (3D path) and MTP=3 verify (4 queries each)."""
    cases = []
    for hd, bs in itertools.product(head_dims, block_sizes):
        half = prefill_tokens // 2
        cases += [
            AttentionCase(f"prefill hd{hd} bs{bs}", (half + 37, half - 37), (0, 300), hd, block_size=bs),
            AttentionCase(f"decode hd{hd} bs{bs}", (1,) * 4, (700, 1500, 64, 2900), hd, block_size=bs),
            AttentionCase(f"verify hd{hd} bs{bs}", (4,) * 3, (900, 40, 2000), hd, block_size=bs),
        ]
    return cases


# --- GDN -----------------------------------------------------------------------------------------------------------


@dataclass
class GdnPrefillInputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    h0: torch.Tensor  # [seqs, HV, V, K] (vLLM's state layout)
    cu_seqlens: torch.Tensor


def gdn_prefill_inputs(lens: Sequence[int], device: str | torch.device, generator: torch.Generator, H: int = 8,
                       HV: int = 24, K: int = 128, V: int = 128,
                       dtype: torch.dtype = torch.float16) -> GdnPrefillInputs:
    total = sum(lens)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float32)

    q = randn(1, total, H, K)
    k = torch.nn.functional.normalize(randn(1, total, H, K), dim=-1)
    v = randn(1, total, HV, V)
    g = -0.1 * torch.rand(1, total, HV, generator=generator)  # log-space decay, as vLLM computes it
    beta = torch.rand(1, total, HV, generator=generator)
    h0 = 0.1 * randn(len(lens), HV, V, K)
    cu = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int64)
    return GdnPrefillInputs(q.to(dtype).to(device), k.to(dtype).to(device), v.to(dtype).to(device), g.to(device),
                            beta.to(dtype).to(device), h0.to(device), cu.to(device))


def run_gdn_prefill(inputs: GdnPrefillInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's chunk_gated_delta_rule (q, k already l2-normalised by the caller here); returns (out, final states)."""
    ops = gdn_ops()
    kwargs: dict[str, Any] = {}
    if "chunk_indices" in inspect.signature(ops.chunk_gated_delta_rule).parameters:
        kwargs["chunk_indices"] = importlib.import_module(ops.__name__ + ".index").prepare_chunk_indices(
            inputs.cu_seqlens, 64)
    out, final = ops.chunk_gated_delta_rule(
        inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta, initial_state=inputs.h0, output_final_state=True,
        cu_seqlens=inputs.cu_seqlens, **kwargs,
    )  # fmt: skip
    return out, final


@dataclass
class GdnDecodeInputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    A_log: torch.Tensor
    dt_bias: torch.Tensor
    cache: torch.Tensor  # [slots, HV, V, K] fp32
    cu_seqlens: torch.Tensor
    slots: torch.Tensor
    accepted: torch.Tensor | None


def gdn_decode_inputs(B: int, T: int, device: str | torch.device, generator: torch.Generator, H: int = 8,
                      HV: int = 24, K: int = 128, V: int = 128, dtype: torch.dtype = torch.float16) -> GdnDecodeInputs:
    """One decode (T=1) or MTP verify (T=1+drafts) step of B requests on a slot cache, as vLLM lays it out."""
    tokens = B * T

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float32)

    cache = 0.1 * randn(1 + B * T, HV, V, K)
    cu = torch.arange(0, tokens + 1, T, dtype=torch.int32)
    if T == 1:
        slots, accepted = torch.arange(1, B + 1, dtype=torch.int32), None
    else:
        slots = torch.arange(1, 1 + B * T, dtype=torch.int32).view(B, T)
        accepted = torch.randint(1, T + 1, (B,), generator=generator, dtype=torch.int32)
    tensors = [randn(1, tokens, H, K).to(dtype), randn(1, tokens, H, K).to(dtype), randn(1, tokens, HV, V).to(dtype),
               randn(tokens, HV).to(dtype), randn(tokens, HV).to(dtype), torch.rand(HV, generator=generator) - 1.0,
               randn(HV), cache, cu, slots]
    moved = [t.to(device) for t in tensors]
    return GdnDecodeInputs(*moved, None if accepted is None else accepted.to(device))


def run_gdn_decode(inputs: GdnDecodeInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's fused_sigmoid_gating_delta_rule_update (l2norm in kernel, state updated in place); (out, cache)."""
    out = gdn_ops().fused_sigmoid_gating_delta_rule_update(
        inputs.A_log, inputs.a, inputs.b, inputs.dt_bias, inputs.q, inputs.k, inputs.v, initial_state=inputs.cache,
        inplace_final_state=True, cu_seqlens=inputs.cu_seqlens, ssm_state_indices=inputs.slots,
        num_accepted_tokens=inputs.accepted, use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    return (out[0] if isinstance(out, tuple) else out), inputs.cache
