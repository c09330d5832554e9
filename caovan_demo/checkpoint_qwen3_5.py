"""The Qwen3.5 demo model as a Hugging Face checkpoint in Qwen3.6-27B's layout, and back (for measuring it).

Tensor names are those of `Qwen3_5ForConditionalGeneration` checkpoints: `model.language_model.*`, `model.visual.*`,
`lm_head.weight` and the MTP layer under `mtp.*`, which vLLM's Qwen3_5MTP loads (transformers ignores it)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import Qwen3_5Config

from caovan_demo.errors import DemoCheckpointError

from . import awq
from .architecture_qwen3_5 import Qwen35Demo, build_models
from .checkpoint import mtp_checkpoint_name, write_generation_config

WEIGHTS = "model.safetensors"
DTYPE = torch.bfloat16
LM_HEAD = "lm_head"


# What vLLM's multimodal processor reads beside the tokenizer (Qwen3-VL's image and video processors); sized small,
# so that vLLM's profiling with the largest dummy image stays cheap on a tiny model.
_VISION_PROCESSING = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
                      "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor"}
PROCESSOR_FILES = {
    "preprocessor_config.json": {**_VISION_PROCESSING, "image_processor_type": "Qwen2VLImageProcessorFast",
                                 "size": {"shortest_edge": 64 * 64, "longest_edge": 512 * 512}},
    "video_preprocessor_config.json": {**_VISION_PROCESSING, "video_processor_type": "Qwen3VLVideoProcessor",
                                       "size": {"shortest_edge": 64 * 64, "longest_edge": 512 * 512 * 2}, "fps": 2,
                                       "min_frames": 2, "max_frames": 8},
}


def _parts(demo: Qwen35Demo) -> list[tuple[str, nn.Module]]:
    return [("model.language_model.", demo.text.model), (f"{LM_HEAD}.", demo.text.lm_head), ("mtp.", demo.mtp),
            ("model.visual.", demo.vision)]


def _name(prefix: str, name: str) -> str:
    return mtp_checkpoint_name(name) if prefix == "mtp." else prefix + name


def checkpoint_tensors(demo: Qwen35Demo) -> dict[str, torch.Tensor]:
    out = {_name(prefix, name): tensor for prefix, module in _parts(demo) for name, tensor in module.state_dict().items()}
    return {k: v.detach().to(DTYPE).contiguous() for k, v in sorted(out.items())}


def linear_modules(demo: Qwen35Demo) -> list[str]:
    """Checkpoint names of the linear layers AWQ may convert: all of them but the LM head, which AWQ keeps."""
    names = [_name(prefix, name) if name else prefix.rstrip(".")
             for prefix, module in _parts(demo) for name, sub in module.named_modules() if isinstance(sub, nn.Linear)]
    return sorted(n for n in names if n != LM_HEAD)


def write_checkpoint(demo: Qwen35Demo, out_dir: Path, tensors: dict[str, torch.Tensor] | None = None,
                     quantization_config: dict | None = None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = checkpoint_tensors(demo) if tensors is None else tensors
    save_file(tensors, str(out_dir / WEIGHTS), metadata={"format": "pt"})
    config = demo.config.to_dict()
    config["text_config"]["dtype"] = "bfloat16"
    config.pop("dtype", None)  # the real config names the dtype under text_config only
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    text = demo.config.text_config
    write_generation_config(out_dir, text.eos_token_id, text.pad_token_id)
    for name, content in PROCESSOR_FILES.items():
        (out_dir / name).write_text(json.dumps(content, indent=2) + "\n")


def load(model_dir: Path) -> Qwen35Demo:
    """The checkpoint back in transformers modules (AWQ layers dequantized), to measure it on the CPU."""
    raw = json.loads((model_dir / "config.json").read_text())
    quant = raw.pop("quantization_config", None)
    demo = build_models(Qwen3_5Config.from_dict(raw), seed=0)
    tensors = load_file(str(model_dir / WEIGHTS))
    if quant is not None:
        tensors = awq.dequantize_tensors(tensors, int(quant["group_size"]), DTYPE)
    for prefix, module in _parts(demo):
        own = {name: _name(prefix, name) for name in module.state_dict()}
        missing = [ckpt for ckpt in own.values() if ckpt not in tensors]
        if missing:
            raise DemoCheckpointError(f"{model_dir / WEIGHTS} lacks {missing[:3]} ({len(missing)} in all); rebuild it with "
                             "`caovan demo-model --arch qwen3_5`")
        module.load_state_dict({name: tensors[ckpt].float() for name, ckpt in own.items()})
    return demo
