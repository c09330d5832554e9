"""The Qwen3.5 demo model's shape: Qwen3.6-27B's architecture (`Qwen3_5ForConditionalGeneration`) scaled down.

Kept from the real config: the keys and their meaning, 3 GDN + 1 full-attention layers per block, dense FFN, GDN
projections not interleaved (in_proj_qkv / in_proj_z / in_proj_b / in_proj_a), the attention output gate, attention
head_dim 256 with partial rotary (0.25) and interleaved M-RoPE sections, grouped KV heads, GDN value heads a multiple
(3x) of key heads, one MTP layer, a vision tower, a float32 SSM state. Scaled down: widths, head counts, depth, vocab.
Every width is a multiple of 128, so AWQ's 128-wide groups tile each quantized layer, also split over 2 GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import (
    Qwen3_5DecoderLayer,
    Qwen3_5RMSNorm,
    Qwen3_5VisionModel,
)

from .architecture import MtpHead

TEXT_CONFIG: dict = {
    "model_type": "qwen3_5_text",
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "full_attention_interval": 4,
    # 24 query / 4 KV heads in the real model; here 6 / 2, so TP=2 still splits both.
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "attn_output_gate": True,
    "attention_bias": False,
    # 16 key / 48 value heads of 128 in the real model.
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 6,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False,
    "mamba_ssm_dtype": "float32",
    "max_position_embeddings": 4096,
    # 64 rotary dims of 256 = 32 frequencies, split 11/11/10 over (t, h, w); text positions use all three alike.
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "dtype": "bfloat16",
}

# Untrained: present so that vLLM's Qwen3_5ForConditionalGeneration builds and loads; the demo is text-only.
VISION_CONFIG: dict = {
    "model_type": "qwen3_5",  # as the real checkpoints write it (transformers maps it to qwen3_5_vision)
    "depth": 1,
    "hidden_size": 256,
    "num_heads": 4,
    "intermediate_size": 512,
    "hidden_act": "gelu_pytorch_tanh",
    "in_channels": 3,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": TEXT_CONFIG["hidden_size"],
    "num_position_embeddings": 256,  # a square grid, 16 x 16 (48 x 48 in the real model)
    "deepstack_visual_indexes": [],
    "initializer_range": 0.02,
}

# The vision placeholders the chat template and vLLM's multimodal processor refer to, added after BPE training.
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
ARCHITECTURE = "Qwen3_5ForConditionalGeneration"


@dataclass
class Qwen35Demo:
    """The trained parts (text model and MTP head) and the untrained vision tower, with the full config."""
    config: Qwen3_5Config
    text: Qwen3_5ForCausalLM
    mtp: MtpHead
    vision: Qwen3_5VisionModel


def demo_config(special_ids: dict[str, int], vision_ids: dict[str, int]) -> Qwen3_5Config:
    text = Qwen3_5TextConfig(**TEXT_CONFIG, **special_ids)
    config = Qwen3_5Config(text_config=text.to_dict(), vision_config=dict(VISION_CONFIG), **vision_ids,
                           tie_word_embeddings=False)
    config.architectures = [ARCHITECTURE]
    return config


def build_models(config: Qwen3_5Config, seed: int) -> Qwen35Demo:
    torch.manual_seed(seed)
    text = Qwen3_5ForCausalLM(config.text_config)
    mtp = MtpHead(config.text_config, norm=Qwen3_5RMSNorm, layer=Qwen3_5DecoderLayer)
    mtp.apply(text._init_weights)
    vision = Qwen3_5VisionModel(config.vision_config)
    return Qwen35Demo(config, text, mtp, vision)
