"""Keep stdout clean for machine-readable output: vLLM, Triton and C extensions log to stdout (file descriptor 1)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (Python-level and descriptor 1) to stderr for the duration; write the clean
    output after the block."""
    sys.stdout.flush()
    saved_fd = os.dup(1)
    saved_stream = sys.stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        sys.stdout = saved_stream
