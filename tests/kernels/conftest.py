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

# CAOVAN_KERNEL_PATH=fma|mma runs them on a GPU's sm_75 code path (the Turing proxy, without or with TensorCore75:
# lab/turing_paths.py), where a 2080 Ti's kernels are the ones under test. Entered before any compile.
if os.environ.get("CAOVAN_KERNEL_PATH"):
    from lab import turing_paths

    assert torch.cuda.is_available(), "CAOVAN_KERNEL_PATH needs a CUDA GPU"
    print(f"kernel tests on the {turing_paths.enter(os.environ['CAOVAN_KERNEL_PATH'])} path")


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
