"""The embedded default: what runs when no model is given (vLLM's CPU build serving the trained demo model, MTP=3)."""

from __future__ import annotations

import json

SERVED_MODEL_NAME = "caovan-demo"
MTP_TOKENS = 3


def engine_args() -> list[str]:
    """vLLM arguments for the demo model on the CPU build.

    bfloat16: the CPU GDN path accepts nothing else. No prefix caching: with MTP it reaches a Triton-only kernel on
    CPU and crashes."""
    spec = {"method": "mtp", "num_speculative_tokens": MTP_TOKENS}
    return [
        "--served-model-name", SERVED_MODEL_NAME,
        "--dtype", "bfloat16",
        "--max-model-len", "2048",
        "--speculative-config", json.dumps(spec, separators=(",", ":")),
        "--no-enable-prefix-caching",
    ]


def engine_env() -> dict[str, str]:
    # KV cache memory of the CPU build, in GiB; the demo model needs little.
    return {"VLLM_CPU_KVCACHE_SPACE": "1"}
