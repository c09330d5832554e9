"""The demo builder's errors, under one root; each message says what is wrong and what to do.

    CaovanDemoError
    ├── UnknownVariantError  (ValueError)   no demo model of that name (builder)
    ├── DemoCheckpointError  (ValueError)   a folder does not hold a complete Qwen3.5 demo checkpoint
    └── AwqFormatError       (ValueError)   a layer that cannot be stored in (or read from) the AWQ GEMM format
"""

from __future__ import annotations


class CaovanDemoError(Exception):
    """The root: anything the demo builder raises on purpose."""


class UnknownVariantError(CaovanDemoError, ValueError):
    """No demo model of that name; the message lists the ones there are."""


class DemoCheckpointError(CaovanDemoError, ValueError):
    """A directory does not hold a complete Qwen3.5 demo checkpoint; the message says what is missing."""


class AwqFormatError(CaovanDemoError, ValueError):
    """A layer cannot be stored in (or read from) the AWQ GEMM format; the message names it and says why."""
