"""How the Qwen3.5 demo models are made: the trained bf16 checkpoint, and its AWQ int4 conversion."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from . import architecture_qwen3_5, awq, checkpoint_qwen3_5, tokenizer, train

# As in Qwen3.6-27B-AWQ's quantization_config: the GDN a/b projections (one output per value head, too narrow for
# int4 words and groups) stay in full precision.
MODULES_TO_NOT_CONVERT = ("linear_attn.in_proj_a", "linear_attn.in_proj_b")
GROUP_SIZE = awq.format.GROUP_SIZE


def train_into(out_dir: Path, settings: train.TrainSettings, tokenizer_samples: int, train_samples: int) -> dict:
    """Train the text model and MTP head on the demo corpus and write the bf16 checkpoint; returns its facts."""
    tok = tokenizer.demo_tokenizer(settings.seed, tokenizer_samples, architecture_qwen3_5.TEXT_CONFIG["vocab_size"],
                                   architecture_qwen3_5.VISION_TOKENS)
    special = tokenizer.special_ids(tok)
    start, end, image, video = (tok.convert_tokens_to_ids(t) for t in architecture_qwen3_5.VISION_TOKENS)
    vision_ids = {"vision_start_token_id": start, "vision_end_token_id": end, "image_token_id": image,
                  "video_token_id": video}
    demo = architecture_qwen3_5.build_models(architecture_qwen3_5.demo_config(special, vision_ids), settings.seed)
    samples = train.encode_samples(tok, settings.seed + 1, train_samples)
    final_losses = train.train(demo.text, demo.mtp, samples, special["pad_token_id"], settings)
    checkpoint_qwen3_5.write_checkpoint(demo, out_dir)
    tokenizer.save_tokenizer(tok, out_dir)
    return {"final_losses": final_losses}


def quantize_into(source: Path, out_dir: Path, log: Callable[[str], None]) -> dict:
    """Convert the bf16 checkpoint in `source` to AWQ int4 (GEMM format, group size 128) in `out_dir`."""
    started = time.monotonic()
    demo = checkpoint_qwen3_5.load(source)
    linears = checkpoint_qwen3_5.linear_modules(demo)
    tensors = awq.quantize_tensors(checkpoint_qwen3_5.checkpoint_tensors(demo), linears, MODULES_TO_NOT_CONVERT,
                                   GROUP_SIZE)
    config = awq.quantization_config(MODULES_TO_NOT_CONVERT, GROUP_SIZE)
    checkpoint_qwen3_5.write_checkpoint(demo, out_dir, tensors, config)
    tokenizer.save_tokenizer(PreTrainedTokenizerFast.from_pretrained(str(source)), out_dir)
    converted = [m for m in linears if awq.checkpoint.is_converted(m, MODULES_TO_NOT_CONVERT)]
    log(f"AWQ int4: {len(converted)} of {len(linears)} linear layers converted in {time.monotonic() - started:.1f} s")
    return {"source": source.name, "awq_layers": len(converted), "kept_layers": len(linears) - len(converted)}
