"""Caovan's management daemon: supervises the vLLM engine, reads its log, serves status, metrics and the API."""

from caovan_kernels import __version__

__all__ = ["__version__"]
