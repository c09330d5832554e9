"""Kernel tests run on CUDA when there is a GPU, else on the CPU through Triton's interpreter.

Triton decides interpreted-or-compiled when each @triton.jit function is decorated, its own library included,
so TRITON_INTERPRET must be set before triton is first imported. Every test draws fresh random inputs; the seed
is printed (shown on failure) and CAOVAN_TEST_SEED replays it.
"""

from __future__ import annotations

import os

import pytest
import torch

# The root conftest sets TRITON_INTERPRET before anything imports triton; a run without it would test nothing real.
assert torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1", "run the kernel tests through pytest"


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> torch.Generator:
    """A CPU generator with a fresh seed per test (inputs are drawn on the CPU, then moved)."""
    seed = int(os.environ.get("CAOVAN_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
    print(f"\n[{request.node.name}] seed={seed} (replay: CAOVAN_TEST_SEED={seed})")
    return torch.Generator().manual_seed(seed)
