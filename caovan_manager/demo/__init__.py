"""The embedded default's model: a tiny trained Qwen3-Next with an MTP head, built locally from synthetic data."""

from .builder import build, content_hash, default_dir, is_built

__all__ = ["build", "content_hash", "default_dir", "is_built"]
