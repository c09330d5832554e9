"""What the launch profile needs to know about a model, read from its config.json (no weights, no transformers).

Handles Qwen3.5/Qwen3.6 configs (text model nested under `text_config`), Qwen3-Next flat configs, and the
`quantization_config` of AWQ / GPTQ checkpoints."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from caovan_kernels.errors import ModelConfigError


@dataclass(frozen=True)
class Quantization:
    method: str  # "awq", "gptq", ... as the checkpoint names it
    bits: int
    group_size: int
    # Substrings of module names left unquantized (vLLM skips a layer whose prefix contains one of them).
    modules_not_converted: tuple[str, ...] = ()

    def converts(self, module_name: str) -> bool:
        return not any(skip in module_name for skip in self.modules_not_converted)


@dataclass(frozen=True)
class VisionTower:
    depth: int
    hidden_size: int
    intermediate_size: int
    out_hidden_size: int
    spatial_merge_size: int


@dataclass(frozen=True)
class ModelFacts:
    path: Path
    architecture: str
    dtype: str  # the checkpoint's dtype as written (bfloat16, float16, ...)
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    layer_types: tuple[str, ...]  # "linear_attention" (GDN) or "full_attention" per decoder layer
    # Full attention
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    attn_output_gate: bool
    # Gated DeltaNet
    gdn_key_heads: int
    gdn_value_heads: int
    gdn_key_head_dim: int
    gdn_value_head_dim: int
    gdn_conv_kernel: int
    # FFN: dense, or MoE when num_experts > 0
    intermediate_size: int
    num_experts: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    mtp_layers: int
    ssm_state_dtype: str  # the recurrent state's dtype (Qwen3.5 configs ask for float32 via mamba_ssm_dtype)
    quantization: Quantization | None = None
    vision: VisionTower | None = None
    dense_layers: tuple[int, ...] = field(default=())  # MoE models: layers that keep a dense FFN

    @property
    def num_gdn_layers(self) -> int:
        return self.layer_types.count("linear_attention")

    @property
    def num_attention_layers(self) -> int:
        return self.layer_types.count("full_attention")

    @property
    def has_mtp(self) -> bool:
        return self.mtp_layers > 0

    @property
    def gdn_conv_dim(self) -> int:
        # The causal conv runs over q, k and v together.
        return 2 * self.gdn_key_heads * self.gdn_key_head_dim + self.gdn_value_heads * self.gdn_value_head_dim


def read_config(model_dir: Path | str) -> dict:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ModelConfigError(
            f"no config.json in {Path(model_dir)}: give the local directory of a Hugging Face checkpoint "
            "(the one holding config.json and the safetensors files)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{path} is not valid JSON ({exc}); re-download or repair the file") from None


def load_model_facts(model_dir: Path | str) -> ModelFacts:
    raw = read_config(model_dir)
    text = raw.get("text_config") or raw  # Qwen3.5/3.6 nest the language model; Qwen3-Next is flat
    where = Path(model_dir) / "config.json"

    def need(key: str, *fallbacks: str) -> int:
        for name in (key, *fallbacks):
            if name in text:
                return text[name]
        raise ModelConfigError(f"{where}: field {key!r} missing{' under text_config' if text is not raw else ''}; "
                               "the launch profile needs it to size memory (is this a Qwen3-Next/3.5/3.6 model?)")

    hidden = need("hidden_size")
    n_layers = need("num_hidden_layers")
    layer_types = text.get("layer_types")
    if layer_types is None:
        interval = text.get("full_attention_interval", 4)
        layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]
    if len(layer_types) != n_layers:
        raise ModelConfigError(f"{where}: layer_types has {len(layer_types)} entries but num_hidden_layers is "
                               f"{n_layers}; fix the config")
    n_heads = need("num_attention_heads")
    has_gdn = "linear_attention" in layer_types
    num_experts = text.get("num_experts", 0) or 0
    return ModelFacts(
        path=Path(model_dir),
        architecture=(raw.get("architectures") or ["unknown"])[0],
        dtype=str(text.get("dtype") or text.get("torch_dtype") or raw.get("dtype") or raw.get("torch_dtype")
                  or "bfloat16"),
        hidden_size=hidden,
        vocab_size=need("vocab_size"),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))),
        max_position_embeddings=need("max_position_embeddings"),
        layer_types=tuple(layer_types),
        num_attention_heads=n_heads,
        num_key_value_heads=text.get("num_key_value_heads", n_heads),
        head_dim=text.get("head_dim") or hidden // n_heads,
        # Qwen3-Next and Qwen3.5 gate the attention output: q_proj produces query and gate.
        attn_output_gate=bool(text.get("attn_output_gate", has_gdn)),
        gdn_key_heads=need("linear_num_key_heads") if has_gdn else 0,
        gdn_value_heads=need("linear_num_value_heads") if has_gdn else 0,
        gdn_key_head_dim=need("linear_key_head_dim") if has_gdn else 0,
        gdn_value_head_dim=need("linear_value_head_dim") if has_gdn else 0,
        gdn_conv_kernel=need("linear_conv_kernel_dim") if has_gdn else 0,
        intermediate_size=text.get("intermediate_size", 0) or 0,
        num_experts=num_experts,
        moe_intermediate_size=text.get("moe_intermediate_size", 0) or 0,
        shared_expert_intermediate_size=text.get("shared_expert_intermediate_size", 0) or 0,
        mtp_layers=int(text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0)) or 0),
        ssm_state_dtype=str(text.get("mamba_ssm_dtype") or "auto"),
        quantization=_quantization(raw.get("quantization_config") or text.get("quantization_config"), where),
        vision=_vision(raw.get("vision_config")),
        dense_layers=tuple(text.get("mlp_only_layers") or ()) if num_experts else (),
    )


def _quantization(qc: dict | None, where: Path) -> Quantization | None:
    if not qc:
        return None
    method = str(qc.get("quant_method") or qc.get("quant_type") or "unknown").lower()
    bits = qc.get("bits", qc.get("w_bit"))
    group = qc.get("group_size", qc.get("q_group_size"))
    if bits is None or group is None:
        raise ModelConfigError(f"{where}: quantization_config ({method}) lacks bits or group_size; the profile "
                               "cannot size the weights. Pin --max-model-len and --gpu-memory-utilization yourself")
    skipped = qc.get("modules_to_not_convert") or qc.get("ignore") or ()
    return Quantization(method=method, bits=int(bits), group_size=int(group), modules_not_converted=tuple(skipped))


def _vision(vc: dict | None) -> VisionTower | None:
    if not vc:
        return None
    return VisionTower(
        depth=vc.get("depth", 0),
        hidden_size=vc.get("hidden_size", 0),
        intermediate_size=vc.get("intermediate_size", 0),
        out_hidden_size=vc.get("out_hidden_size", 0),
        spatial_merge_size=vc.get("spatial_merge_size", 2),
    )
