"""Write the trained demo model as a Hugging Face checkpoint in the layout vLLM's Qwen3Next and Qwen3NextMTP load."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import Qwen3NextForCausalLM

from .architecture import MtpHead


def _split_experts(name: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    """transformers keeps experts fused ([E, 2I, H] gate+up, [E, H, I] down); checkpoints store one per expert."""
    prefix = name.rsplit(".", 1)[0]
    if name.endswith("mlp.experts.gate_up_proj"):
        gate, up = tensor.chunk(2, dim=1)
        out = {}
        for e in range(tensor.shape[0]):
            out[f"{prefix}.{e}.gate_proj.weight"] = gate[e]
            out[f"{prefix}.{e}.up_proj.weight"] = up[e]
        return out
    if name.endswith("mlp.experts.down_proj"):
        return {f"{prefix}.{e}.down_proj.weight": tensor[e] for e in range(tensor.shape[0])}
    return {name: tensor}


def mtp_checkpoint_name(name: str) -> str:
    """An MtpHead parameter's checkpoint name: vLLM's MTP models load `mtp.layers.<i>.*` and `mtp.<norm|fc>.*`."""
    return "mtp." + (name.replace("layer.", "layers.0.", 1) if name.startswith("layer.") else name)


def checkpoint_tensors(model: Qwen3NextForCausalLM, mtp: MtpHead) -> dict[str, torch.Tensor]:
    """All weights under their checkpoint names: the main model's, and the MTP head's under `mtp.`."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        out.update(_split_experts(name, tensor))
    for name, tensor in mtp.state_dict().items():
        out.update(_split_experts(mtp_checkpoint_name(name), tensor))
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sorted(out.items())}


def write_generation_config(out_dir: Path, eos_token_id: int, pad_token_id: int) -> None:
    """The demo's default sampling, in the keys vLLM reads from generation_config.json (temperature, top_p, top_k,
    min_p, penalties, max_new_tokens; not transformers' do_sample): greedy. A request that leaves sampling at its
    default gets the recital, whatever its client; and vLLM's CPU build, which has no Triton backend for its
    speculative-decoding sampler, samples correctly only greedily (README, "The embedded default")."""
    generation = {"eos_token_id": eos_token_id, "pad_token_id": pad_token_id, "temperature": 0.0}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")


def write_checkpoint(model: Qwen3NextForCausalLM, mtp: MtpHead, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(checkpoint_tensors(model, mtp), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["dtype"] = "bfloat16"
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_generation_config(out_dir, model.config.eos_token_id, model.config.pad_token_id)
