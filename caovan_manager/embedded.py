"""The embedded default: what runs when no model is given (vLLM's CPU build serving the trained demo model).

The values are the contract's (caovan_kernels.contract); the launch profile of `caovan-vllm-serve` adds what a CPU
needs (bfloat16, MTP speculative decoding, no prefix caching), as it does for any model."""

from __future__ import annotations

from caovan_kernels.contract import EMBEDDED_SERVED_MODEL_NAME as SERVED_MODEL_NAME
from caovan_kernels.contract import embedded_engine_args as engine_args
from caovan_kernels.contract import embedded_engine_env as engine_env

__all__ = ["SERVED_MODEL_NAME", "engine_args", "engine_env"]
