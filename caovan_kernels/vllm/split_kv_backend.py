"""vLLM's Triton attention backend with the MTP verify taken by Caovan's split-KV kernel (caovan_kernels.attention).

The plugin registers CaovanTritonAttentionBackend in TRITON_ATTN's place (attention_seam.py), so wherever vLLM
runs Triton attention (the only backend a Turing GPU gets from vLLM 0.24 on) it builds these subclasses:

- the metadata builder sizes one workspace when the engine starts (vLLM's own builder does so for its split
  launch: a CUDA graph replays the addresses it captured) and tags each batch of 2 .. 1 + k query tokens per
  sequence that plan.plan_launch takes;
- the implementation runs a tagged batch through the split-KV kernel, anything else through vLLM's own forward.

A layer whose attention the kernel does not compute (sliding window, soft cap, ALiBi, sinks, a quantized KV cache,
encoder attention) keeps vLLM's forward, and says so once in the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from vllm.v1.attention.backend import AttentionType
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionBackend,
    TritonAttentionImpl,
    TritonAttentionMetadataBuilder,
)

from caovan_kernels import contract
from caovan_kernels.attention import plan
from caovan_kernels.attention.split_kv import SplitWorkspace, split_kv_attention, tensor_cores_here

from .markers import emit_once
from .settings import EnginePluginSettings


@dataclass(frozen=True)
class SplitBatch:
    """What a batch taken by the split kernel carries beside vLLM's metadata."""

    launch: plan.SplitLaunch
    workspace: SplitWorkspace
    min_tiles: int


class CaovanTritonAttentionMetadataBuilder(TritonAttentionMetadataBuilder):
    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._caovan_split: _Planner | None = _Planner.for_engine(self, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
        meta = super().build(common_prefix_len, common_attn_metadata, fast_build)
        meta.caovan_split = None if self._caovan_split is None else self._caovan_split.batch(meta)
        return meta


class _Planner:
    """One builder's split launches: the engine's shapes, the GPU's SMs and the workspace sized for them."""

    def __init__(self, kv_heads: int, group: int, max_query_len: int, sms: int, tensor_cores: bool,
                 workspace: SplitWorkspace) -> None:
        self.kv_heads, self.group, self.max_query_len, self.sms = kv_heads, group, max_query_len, sms
        self.tensor_cores, self.workspace = tensor_cores, workspace

    @classmethod
    def for_engine(cls, builder: TritonAttentionMetadataBuilder, vllm_config: Any,
                   device: torch.device) -> _Planner | None:
        settings = EnginePluginSettings.from_env().with_additional_config(vllm_config.additional_config)
        speculative = getattr(vllm_config, "speculative_config", None)
        tokens = getattr(speculative, "num_speculative_tokens", None) or 0
        kv_heads, q_heads, head_dim = builder.num_heads_kv, builder.num_heads_q, builder.headdim
        dtype = vllm_config.model_config.dtype
        reason = None
        if not settings.enabled or settings.split_kv == "off":
            reason = "caovan_split_kv=off" if settings.enabled else "plugin disabled"
        elif device.type != "cuda":
            reason = "no CUDA device"
        elif tokens == 0:
            reason = "no speculative decoding: every batch of more than one query token is a prefill"
        elif head_dim > plan.MAX_HEAD_DIM or q_heads % kv_heads:
            reason = f"head dim {head_dim} or {q_heads} query heads over {kv_heads} KV heads not supported"
        max_query_len = 1 + tokens
        tensor_cores = reason is None and tensor_cores_here(device, dtype)
        sms = torch.cuda.get_device_properties(device).multi_processor_count if reason is None else 0
        group = q_heads // kv_heads if kv_heads else 0
        first = reason is None and plan.plan_launch(1, kv_heads, group, max_query_len, sms, tensor_cores)
        if reason is None and not first:
            reason = (f"{max_query_len} query tokens x {group} heads per KV head exceed "
                      f"{plan.max_rows(tensor_cores)} rows per program")
        if reason is not None:
            emit_once(contract.SplitKvVerdict(False, reason).line())
            return None
        max_batch = vllm_config.scheduler_config.max_num_seqs
        programs = plan.max_programs(kv_heads, group, max_query_len, sms, max_batch, tensor_cores)
        rows = plan.rows_for(max_query_len, group)
        workspace = SplitWorkspace.allocate(programs, rows, head_dim, device)
        largest = max(b for b in range(1, max_batch + 1)
                      if plan.plan_launch(b, kv_heads, group, max_query_len, sms, tensor_cores))
        mib = sum(t.numel() * t.element_size() for t in (workspace.output, workspace.maximum, workspace.total)) / 2**20
        emit_once(contract.SplitKvVerdict(True, (
            f"MTP verify ({plan.MIN_QUERY_LEN}..{max_query_len} query tokens) through the split-KV kernel for batches "
            f"of 1..{largest} sequences ({first.splits} segments per KV head at one, {sms} SMs, "
            f"{'tensor-core' if tensor_cores else 'FMA'} dots), vLLM's attention otherwise; workspace {mib:.1f} MiB"
        )).line())
        return cls(kv_heads, group, max_query_len, sms, tensor_cores, workspace)

    def batch(self, meta: Any) -> SplitBatch | None:
        if meta.max_query_len > self.max_query_len or getattr(meta, "mm_prefix_range_tensor", None) is not None:
            return None
        # vLLM 0.21's metadata has no `causal` (always causal); later ones may carry a per-sequence tensor
        if getattr(meta, "rswa_prefix_lens", None) is not None or getattr(meta, "causal", True) is not True:
            return None
        batch = meta.seq_lens.shape[0]
        launch = plan.plan_launch(batch, self.kv_heads, self.group, meta.max_query_len, self.sms, self.tensor_cores)
        # sized for --max-num-seqs: a larger batch (vLLM pads a CUDA graph's batch within it) keeps vLLM's launch
        if launch is None or not self.workspace.holds(launch.programs(batch, self.kv_heads), launch.rows,
                                                      self.workspace.output.shape[2]):
            return None
        return SplitBatch(launch, self.workspace, plan.MIN_TOKENS_PER_SPLIT // launch.tile)


def kv_caches(kv_cache: torch.Tensor, head_size: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """K and V as [blocks, block_size, kv_heads, head_size] views of the layer's cache, read from its shape: vLLM 0.21
    stacks them ([blocks, 2, block_size, kv_heads, dim]), later releases pack them as the halves of the last dim
    ([blocks, kv_heads, block_size, 2 * dim]); None for any other layout (vLLM's own forward then runs)."""
    if kv_cache.dim() == 5 and kv_cache.shape[1] == 2 and kv_cache.shape[-1] == head_size:
        key_cache, value_cache = kv_cache.unbind(1)
        return key_cache, value_cache
    if kv_cache.dim() == 4 and kv_cache.shape[-1] == 2 * head_size:
        key_cache, value_cache = kv_cache.transpose(1, 2).split(head_size, dim=-1)
        return key_cache, value_cache
    return None


def _refusal(impl: TritonAttentionImpl) -> str | None:
    """Why the split kernel cannot compute this layer's attention, or None."""
    if impl.attn_type != AttentionType.DECODER:
        return f"{impl.attn_type} attention"
    if impl.sliding_window != (-1, -1):
        return f"sliding window {impl.sliding_window[0] + 1}"
    if impl.logits_soft_cap:
        return f"soft cap {impl.logits_soft_cap}"
    if impl.alibi_slopes is not None:
        return "ALiBi"
    if getattr(impl, "sinks", None) is not None:
        return "attention sinks"
    if impl.kv_cache_dtype not in ("auto", "float16", "bfloat16"):
        return f"KV cache dtype {impl.kv_cache_dtype}"
    if getattr(impl, "chunk_lookback", -1) != -1:
        return "chunked local attention"
    return None


def _keeps_vllm(why: str) -> None:
    emit_once(f"{contract.SPLIT_KV} a layer keeps vLLM's attention for its verify: {why}")


class CaovanTritonAttentionImpl(TritonAttentionImpl):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._caovan_refusal = _refusal(self)
        if self._caovan_refusal is not None:
            _keeps_vllm(f"{self._caovan_refusal} is not computed by the split-KV kernel")

    def forward(self, layer: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: Any, output: torch.Tensor,
                output_scale: torch.Tensor | None = None, output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        split: SplitBatch | None = getattr(attn_metadata, "caovan_split", None)
        if (split is None or self._caovan_refusal is not None or output_scale is not None
                or output_block_scale is not None or query.dtype != kv_cache.dtype):
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                   output_block_scale)
        caches = kv_caches(kv_cache, self.head_size)
        if caches is None:
            _keeps_vllm(f"unknown KV cache layout {tuple(kv_cache.shape)}")
            self._caovan_refusal = "unknown KV cache layout"
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                   output_block_scale)
        key_cache, value_cache = caches
        tokens = attn_metadata.num_actual_tokens
        split_kv_attention(query[:tokens], key_cache, value_cache, attn_metadata.block_table, attn_metadata.seq_lens,
                           attn_metadata.query_start_loc, self.scale, output[:tokens], split.launch, split.workspace,
                           split.min_tiles)
        return output


class CaovanTritonAttentionBackend(TritonAttentionBackend):
    @staticmethod
    def get_impl_cls() -> type[CaovanTritonAttentionImpl]:
        return CaovanTritonAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[CaovanTritonAttentionMetadataBuilder]:
        return CaovanTritonAttentionMetadataBuilder

