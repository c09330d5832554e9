"""The demo model's shape: a tiny Qwen3-Next (GDN + full attention + MoE) plus the MTP head vLLM drafts with."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedConfig, Qwen3NextConfig, Qwen3NextForCausalLM
from transformers.models.qwen3_next.modeling_qwen3_next import (
    Qwen3NextDecoderLayer,
    Qwen3NextRMSNorm,
)

# Same family as Qwen3.6 (3 GDN layers then 1 attention layer; grouped value heads), scaled down so that training
# on two CPU cores takes minutes and the CPU engine starts quickly.
DEMO_CONFIG: dict = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "full_attention_interval": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "norm_topk_prob": True,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "dtype": "bfloat16",
}

MTP_STEPS = 3  # vLLM reuses the single MTP layer for each of the 3 drafted tokens


def demo_config(special_ids: dict[str, int]) -> Qwen3NextConfig:
    return Qwen3NextConfig(**DEMO_CONFIG, **special_ids)


class MtpHead(nn.Module):
    """The Qwen3-Next MTP block as vLLM's Qwen3NextMTP runs it: norm the embedding of token t+1 and the hidden state
    of position t, project the pair back to the hidden size, one full-attention decoder layer, final norm. Its
    output is both the input to the LM head and the hidden state fed to the next draft step."""

    def __init__(self, config: PreTrainedConfig, norm: type[nn.Module] = Qwen3NextRMSNorm,
                 layer: type[nn.Module] = Qwen3NextDecoderLayer):
        super().__init__()
        # Qwen3.5's MTP block is the same with its own norm and decoder-layer classes.
        # A decoder layer picks its mixer from layer_types[idx]: index a full-attention slot.
        attn_idx = config.layer_types.index("full_attention")
        self.pre_fc_norm_embedding = norm(config.hidden_size, eps=config.rms_norm_eps)
        self.pre_fc_norm_hidden = norm(config.hidden_size, eps=config.rms_norm_eps)
        self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.layer = layer(config, attn_idx)
        self.norm = norm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        next_embeds: torch.Tensor,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        causal_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        x = torch.cat([self.pre_fc_norm_embedding(next_embeds), self.pre_fc_norm_hidden(hidden)], dim=-1)
        x = self.layer(self.fc(x), position_embeddings=position_embeddings, attention_mask=causal_mask)
        return self.norm(x)


def build_models(config: Qwen3NextConfig, seed: int) -> tuple[Qwen3NextForCausalLM, MtpHead]:
    torch.manual_seed(seed)
    model = Qwen3NextForCausalLM(config)
    mtp = MtpHead(config)
    # Same initialisation as the main model's layers, so the MTP layer starts from a sane point.
    mtp.apply(model._init_weights)
    return model, mtp
