from __future__ import annotations

import os
from pathlib import Path

import torch

# Without a GPU the kernel tests run Triton's interpreter. Triton fixes interpreted-or-compiled when each
# @triton.jit function (its own library's too) is decorated, so this must precede every import of triton; the
# imports below pull it in. Engines started by tests get the variable removed again (tests/support/engine.py).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest

from caovan_manager import embedded
from caovan_manager.demo import build
from tests.support.engine import Engine, start_engine, stop_engine


@pytest.fixture(scope="session")
def demo_model_dir() -> Path:
    """The trained demo model (built once, then taken from the content-hashed cache)."""
    return build()


@pytest.fixture(scope="session")
def engine(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """One real vLLM CPU engine on the demo model with MTP=3, shared by the whole session."""
    log_path = tmp_path_factory.mktemp("engine") / "engine.log"
    running = start_engine(demo_model_dir, embedded.engine_args(), embedded.engine_env(), log_path)
    yield running
    stop_engine(running)
