"""The demo models, built locally from synthetic data: the embedded default (a tiny trained Qwen3-Next with an MTP
head) and the same recipe in Qwen3.6-27B's architecture (Qwen3.5), bf16 or AWQ int4."""

from .builder import (
    DEFAULT,
    VARIANTS,
    UnknownVariantError,
    build,
    content_hash,
    default_dir,
    is_built,
)

__all__ = ["DEFAULT", "VARIANTS", "UnknownVariantError", "build", "content_hash", "default_dir", "is_built"]
