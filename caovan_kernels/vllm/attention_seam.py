"""Attention interface check: whether the installed vLLM lets a plugin put its own class in TRITON_ATTN's place,
read by feature (vLLM's attention backend registry and the Triton backend's classes), not by version number."""

from __future__ import annotations

import importlib

from .seams import SeamCheck

NAME = "triton_attention_backend_registry"
BACKEND = "caovan_kernels.vllm.split_kv_backend.CaovanTritonAttentionBackend"
_TRITON = "vllm.v1.attention.backends.triton_attn"
# What split_kv_backend subclasses and calls; all must exist for the takeover.
_NEEDS = {
    "TritonAttentionBackend": ("get_impl_cls", "get_builder_cls"),
    "TritonAttentionImpl": ("forward",),
    "TritonAttentionMetadataBuilder": ("build",),
}


def check_attention_seam() -> SeamCheck:
    try:
        registry = importlib.import_module("vllm.v1.attention.backends.registry")
        triton_attn = importlib.import_module(_TRITON)
    except Exception as exc:  # noqa: BLE001  (any import failure means: not this layout)
        return SeamCheck(NAME, "SKIP", f"vLLM's attention backend registry or Triton backend not importable "
                                       f"({type(exc).__name__})")
    enum = getattr(registry, "AttentionBackendEnum", None)
    if not callable(getattr(registry, "register_backend", None)) or enum is None or "TRITON_ATTN" not in enum.__members__:
        return SeamCheck(NAME, "SKIP", "no register_backend or no TRITON_ATTN member in vLLM's backend registry")
    missing = [f"{cls}.{attr}" for cls, attrs in _NEEDS.items() for attr in attrs
               if not hasattr(getattr(triton_attn, cls, None), attr)]
    if missing:
        return SeamCheck(NAME, "SKIP", f"{_TRITON} lacks {', '.join(missing)}")
    return SeamCheck(NAME, "PASS", f"register_backend(TRITON_ATTN) takes {BACKEND.rsplit('.', 1)[1]}")


def register_attention_backend() -> SeamCheck:
    """Put the split-KV backend in TRITON_ATTN's place where the seam exists; the check says what happened."""
    check = check_attention_seam()
    if check.status == "PASS":
        registry = importlib.import_module("vllm.v1.attention.backends.registry")
        registry.register_backend(registry.AttentionBackendEnum.TRITON_ATTN, BACKEND)
    return check
