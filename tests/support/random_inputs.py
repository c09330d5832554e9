"""The `gen` fixture: a seeded CPU generator per test, as a plugin of its own so that the kernel tests can run on a
GPU machine that has torch and Triton but not the daemon's dependencies (which tests/conftest.py imports):

    python -m pytest tests/kernels --confcutdir=tests/kernels -p tests.support.random_inputs
"""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> torch.Generator:
    """A CPU generator with a fresh seed per test (inputs are drawn on the CPU, then moved): the seed is printed
    (shown on failure) and CAOVAN_TEST_SEED replays it."""
    seed = int(os.environ.get("CAOVAN_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
    print(f"\n[{request.node.name}] seed={seed} (replay: CAOVAN_TEST_SEED={seed})")
    return torch.Generator().manual_seed(seed)
