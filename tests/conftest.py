from __future__ import annotations

from pathlib import Path

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
