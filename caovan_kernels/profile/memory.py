"""The memory model behind AutoMem, AutoSpec and Elastic-KV: bytes per GPU for weights, KV cache per token, GDN state
per sequence, activations, and what is left for the cache pool. Everything is per tensor-parallel rank.

It follows how vLLM (0.2x-0.33) lays memory out for hybrid GDN models:
- every linear layer and the vocabulary are split across TP ranks (KV heads are replicated once TP exceeds them);
- the KV cache holds K and V for each full-attention layer, plus the MTP head's attention layer when drafting;
- each GDN layer keeps per sequence a conv state (conv_dim x (kernel-1+S), engine dtype) and a recurrent state
  (HV x V x K, the SSM dtype) in 1+S slots with S draft tokens (the verify step writes one slot per draft token);
- the attention block is the smallest multiple of 16 tokens whose page is at least one GDN state page, and GDN pages
  are padded to that size, so both share one block pool;
- layers are put into groups of one size (vLLM's `_get_kv_cache_groups_uniform_page_size`): the smaller of the
  attention-layer and GDN-layer counts, or the larger when it is under 1.5x the smaller; one block id holds a page
  for each layer slot of a group, so a group short of layers still costs a full group (Qwen3.6-27B with MTP: 17
  attention layers, 48 GDN layers in 3 groups of 17 slots);
- a sequence of L tokens takes cdiv(L, block) block ids per attention group and 1+S per GDN group (2+S with prefix
  caching on: vLLM's "align" mode keeps the last full block's state too), and vLLM reports
  "Maximum concurrency" as the pool's block ids over that count at --max-model-len, "GPU KV cache size" as that
  concurrency times --max-model-len (vllm/v1/core/kv_cache_utils.py, 0.21 to 0.26).
Checked on an H200 with vLLM 0.21 against one TP2 rank of Qwen3.6-27B-AWQ (docs/verification.md, "Memory fit").
Norms, A_log, dt_bias and other vectors (a few MB) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import ModelFacts, Quantization

MIB = 1 << 20
KERNEL_BLOCK_ALIGNMENT = 16  # tokens; vLLM's attention kernels take multiples of 16
ENGINE_DTYPE_BYTES = 2  # fp16 / bf16: what the engine runs unquantized weights, conv state and KV cache in
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1}

# Activations are measured by vLLM's profiling run inside its budget: per prefill token the hidden state copies,
# the FFN's gate/up/down buffers and the GDN conv input; plus a fixed part for cuBLAS/NCCL workspaces, the sampler
# and Marlin scratch.
ACTIVATION_FIXED_BYTES = 512 * MIB
# Inside vLLM's budget since 0.21 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on by default): the CUDA graph pools of
# the target and the MTP drafter, estimated before the KV cache is sized. Measured 0.12 GiB for one rank at
# --max-num-seqs 4 (capture sizes up to 32); twice that is kept.
CUDA_GRAPH_BYTES = 256 * MIB
# What vLLM's weight load took beyond the tensors counted here, measured on the same rank (9.49 GiB loaded against
# 8.99 GiB counted, vision tower included): Marlin's repacked layout and workspaces, rotary caches, buffers.
LOAD_OVERHEAD_BYTES = 512 * MIB
# Outside vLLM's budget: the engine's CUDA context and allocator headroom. vLLM refuses to start when the free memory
# it finds (after its context exists) is below the budget, so the budget leaves this much of an idle card unused.
OUTSIDE_BUDGET_BYTES = 1280 * MIB


@dataclass(frozen=True)
class Linear:
    name: str  # module path, matched against quantization_config's modules_to_not_convert
    in_features: int  # per rank
    out_features: int  # per rank


def quantized_linear_bytes(layer: Linear, q: Quantization) -> int:
    """Packed weights, fp16 scales per group and packed zero points per group (AWQ and GPTQ both store them);
    GPTQ adds an int32 g_idx per input row."""
    groups = -(-layer.in_features // q.group_size) if q.group_size > 0 else 1
    packed = layer.in_features * layer.out_features * q.bits // 8
    scales = groups * layer.out_features * 2
    zeros = groups * layer.out_features * q.bits // 8
    g_idx = layer.in_features * 4 if q.method == "gptq" else 0
    return packed + scales + zeros + g_idx


def _decoder_linears(m: ModelFacts, tp: int, prefix: str, kind: str, layer_index: int) -> list[Linear]:
    h = m.hidden_size
    layers: list[Linear] = []
    if kind == "full_attention":
        q_out = m.num_attention_heads * m.head_dim * (2 if m.attn_output_gate else 1)
        kv_out = max(1, m.num_key_value_heads // tp) * m.head_dim
        layers += [Linear(f"{prefix}.self_attn.q_proj", h, q_out // tp),
                   Linear(f"{prefix}.self_attn.k_proj", h, kv_out),
                   Linear(f"{prefix}.self_attn.v_proj", h, kv_out),
                   Linear(f"{prefix}.self_attn.o_proj", m.num_attention_heads * m.head_dim // tp, h)]
    else:
        v_dim = m.gdn_value_heads * m.gdn_value_head_dim
        if m.architecture.startswith("Qwen3Next"):  # interleaved projections
            layers += [Linear(f"{prefix}.linear_attn.in_proj_qkvz", h, (m.gdn_conv_dim + v_dim) // tp),
                       Linear(f"{prefix}.linear_attn.in_proj_ba", h, 2 * m.gdn_value_heads // tp)]
        else:
            layers += [Linear(f"{prefix}.linear_attn.in_proj_qkv", h, m.gdn_conv_dim // tp),
                       Linear(f"{prefix}.linear_attn.in_proj_z", h, v_dim // tp),
                       Linear(f"{prefix}.linear_attn.in_proj_b", h, m.gdn_value_heads // tp),
                       Linear(f"{prefix}.linear_attn.in_proj_a", h, m.gdn_value_heads // tp)]
        layers.append(Linear(f"{prefix}.linear_attn.out_proj", v_dim // tp, h))
    if m.num_experts and layer_index not in m.dense_layers:
        layers += [Linear(f"{prefix}.mlp.experts", h, m.num_experts * 3 * m.moe_intermediate_size // tp)]
        if m.shared_expert_intermediate_size:
            layers += [Linear(f"{prefix}.mlp.shared_expert", h, 3 * m.shared_expert_intermediate_size // tp)]
    else:
        layers += [Linear(f"{prefix}.mlp.gate_up_proj", h, 2 * m.intermediate_size // tp),
                   Linear(f"{prefix}.mlp.down_proj", m.intermediate_size // tp, h)]
    return layers


@dataclass(frozen=True)
class WeightBytes:
    quantized_linear: int  # linear layers stored in the checkpoint's quantized format
    unquantized_linear: int  # linear layers left in 16 bit (modules_to_not_convert, or an unquantized model)
    embeddings: int  # input embedding and LM head (never quantized by AWQ/GPTQ)
    other: int  # GDN conv1d, MoE routers, the vision tower estimate

    @property
    def total(self) -> int:
        return self.quantized_linear + self.unquantized_linear + self.embeddings + self.other


def weight_bytes_per_gpu(m: ModelFacts, tp: int, vision: bool = True) -> WeightBytes:
    """Weights per GPU; `vision=False` leaves the vision tower out (served text only: vLLM does not load it)."""
    linears: list[Linear] = []
    for i, kind in enumerate(m.layer_types):
        linears += _decoder_linears(m, tp, f"model.layers.{i}", kind, i)
    for j in range(m.mtp_layers):
        # vLLM builds the MTP head's weights (fc + one full-attention decoder layer); its embedding and LM head are
        # shared with the target model, so they are not counted twice.
        linears.append(Linear(f"mtp.fc.{j}", 2 * m.hidden_size, m.hidden_size // tp))
        linears += _decoder_linears(m, tp, f"mtp.layers.{j}", "full_attention", -1)
    quantized = unquantized = 0
    for layer in linears:
        if m.quantization is not None and m.quantization.converts(layer.name):
            quantized += quantized_linear_bytes(layer, m.quantization)
        else:
            unquantized += layer.in_features * layer.out_features * ENGINE_DTYPE_BYTES
    vocab_rows = m.vocab_size // tp
    embeddings = vocab_rows * m.hidden_size * ENGINE_DTYPE_BYTES * (1 if m.tie_word_embeddings else 2)
    other = m.num_gdn_layers * (m.gdn_conv_dim // tp) * m.gdn_conv_kernel * ENGINE_DTYPE_BYTES
    if m.num_experts:
        other += len(m.layer_types) * m.hidden_size * m.num_experts * ENGINE_DTYPE_BYTES
    if m.vision is not None and vision:
        other += vision_params(m) * ENGINE_DTYPE_BYTES // tp
    return WeightBytes(quantized, unquantized, embeddings, other)


def vision_params(m: ModelFacts) -> int:
    """Estimate of the vision tower: per block qkv + proj (4 h^2) and MLP (2 h i), plus the patch merger."""
    v = m.vision
    merged = v.hidden_size * v.spatial_merge_size ** 2
    return v.depth * (4 * v.hidden_size ** 2 + 2 * v.hidden_size * v.intermediate_size) \
        + merged * merged + merged * v.out_hidden_size


def kv_layers(m: ModelFacts, spec_tokens: int) -> int:
    return m.num_attention_layers + (m.mtp_layers if spec_tokens else 0)


def kv_bytes_per_token_per_layer(m: ModelFacts, tp: int, kv_dtype_bytes: int) -> int:
    return 2 * max(1, m.num_key_value_heads // tp) * m.head_dim * kv_dtype_bytes


def kv_bytes_per_token(m: ModelFacts, tp: int, kv_dtype_bytes: int, spec_tokens: int) -> int:
    return kv_layers(m, spec_tokens) * kv_bytes_per_token_per_layer(m, tp, kv_dtype_bytes)


def gdn_state_page_bytes(m: ModelFacts, tp: int, spec_tokens: int, ssm_dtype_bytes: int) -> int:
    """One GDN layer's state for one slot on one rank, before padding: conv state + recurrent state."""
    conv = (m.gdn_conv_dim // tp) * (m.gdn_conv_kernel - 1 + spec_tokens) * ENGINE_DTYPE_BYTES
    recurrent = (m.gdn_value_heads // tp) * m.gdn_value_head_dim * m.gdn_key_head_dim * ssm_dtype_bytes
    return conv + recurrent


def _group_size(attention_layers: int, gdn_layers: int) -> int:
    """The one group size vLLM gives every KV cache group of a hybrid model."""
    small, large = min(attention_layers, gdn_layers), max(attention_layers, gdn_layers)
    return large if large * 2 < small * 3 else small


@dataclass(frozen=True)
class CacheLayout:
    block_tokens: int  # attention block size after alignment with the GDN page
    kv_bytes_per_token: int  # all KV layers on one rank
    block_bytes: int  # one block id: a page (block_tokens of one layer) for each slot of a group
    attention_groups: int
    gdn_blocks_per_seq: int  # block ids one sequence's GDN state takes: GDN groups x (1+S, or 2+S cached) slots

    @property
    def gdn_state_bytes_per_seq(self) -> int:
        return self.gdn_blocks_per_seq * self.block_bytes

    def blocks_for(self, max_model_len: int) -> int:
        """Block ids one sequence of max_model_len tokens takes."""
        return self.attention_groups * -(-max_model_len // self.block_tokens) + self.gdn_blocks_per_seq

    def bytes_for(self, num_seqs: int, max_model_len: int) -> int:
        return num_seqs * self.blocks_for(max_model_len) * self.block_bytes

    def max_model_len(self, pool_bytes: int, num_seqs: int) -> int:
        """Longest context (whole blocks) such that num_seqs sequences of it fit in the pool; 0 if none does."""
        per_seq = pool_bytes // self.block_bytes // num_seqs - self.gdn_blocks_per_seq
        if per_seq <= 0:
            return 0
        return per_seq // self.attention_groups * self.block_tokens

    def concurrency(self, pool_bytes: int, max_model_len: int) -> float:
        """vLLM's "Maximum concurrency for max_model_len tokens per request" for a KV pool of pool_bytes."""
        return pool_bytes // self.block_bytes / self.blocks_for(max_model_len)

    def kv_cache_tokens(self, pool_bytes: int, max_model_len: int) -> int:
        """vLLM's "GPU KV cache size: N tokens" (concurrency times max_model_len, not the blocks' tokens)."""
        return int(self.concurrency(pool_bytes, max_model_len) * max_model_len)


def cache_layout(m: ModelFacts, tp: int, spec_tokens: int, kv_dtype_bytes: int, ssm_dtype_bytes: int,
                 prefix_caching: bool = False) -> CacheLayout:
    per_token_layer = kv_bytes_per_token_per_layer(m, tp, kv_dtype_bytes)
    attention = kv_layers(m, spec_tokens)  # the MTP head's attention layer has the target's spec: same group
    kv_token = kv_bytes_per_token(m, tp, kv_dtype_bytes, spec_tokens)
    if not m.num_gdn_layers:
        return CacheLayout(KERNEL_BLOCK_ALIGNMENT, kv_token, attention * KERNEL_BLOCK_ALIGNMENT * per_token_layer,
                           1, 0)
    page = gdn_state_page_bytes(m, tp, spec_tokens, ssm_dtype_bytes)
    unit = KERNEL_BLOCK_ALIGNMENT * per_token_layer
    block = KERNEL_BLOCK_ALIGNMENT * -(-page // unit)
    group = _group_size(attention, m.num_gdn_layers)
    gdn_groups = -(-m.num_gdn_layers // group)
    slots = 1 + spec_tokens + (1 if prefix_caching else 0)
    return CacheLayout(block, kv_token, group * block * per_token_layer, -(-attention // group), gdn_groups * slots)


def activation_bytes(m: ModelFacts, tp: int, max_num_batched_tokens: int) -> int:
    ffn = max(m.intermediate_size, m.moe_intermediate_size, m.shared_expert_intermediate_size)
    per_token = ENGINE_DTYPE_BYTES * (4 * m.hidden_size + 3 * ffn // tp + 2 * m.gdn_conv_dim // tp)
    return max_num_batched_tokens * per_token + ACTIVATION_FIXED_BYTES


def inside_budget_overheads(cuda_graphs: bool) -> int:
    """vLLM's budget spent before the KV cache besides the counted weights and activations: its weight load's
    extra and, unless --enforce-eager, the CUDA graph pools."""
    return LOAD_OVERHEAD_BYTES + (CUDA_GRAPH_BYTES if cuda_graphs else 0)
