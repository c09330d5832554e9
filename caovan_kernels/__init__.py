"""Caovan's vLLM plugin: GDNCore kernels, launch profiles and doctor for Turing GPUs."""

__version__ = "0.1.0"
