"""How vLLM finds the plugin: by the entry point of an installed distribution, which a checkout on PYTHONPATH lacks."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import tomllib

from caovan_kernels.errors import PluginNotInstalled
from caovan_kernels.vllm import (
    ENTRY_POINT_GROUP,
    ENTRY_POINT_NAME,
    registered_entry_point,
    require_registered,
)

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def test_the_installed_entry_point_is_the_one_pyproject_declares() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"][ENTRY_POINT_GROUP]
    assert registered_entry_point() == declared[ENTRY_POINT_NAME]
    assert require_registered() == declared[ENTRY_POINT_NAME]


def test_without_an_installed_distribution_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a source checkout merely on PYTHONPATH looks like: vLLM's other plugins, none of ours.
    others = metadata.EntryPoints([metadata.EntryPoint("lora_filesystem_resolver", "vllm.plugins:x",
                                                       ENTRY_POINT_GROUP)])
    monkeypatch.setattr(metadata, "entry_points", lambda group: others)
    assert registered_entry_point() is None
    with pytest.raises(PluginNotInstalled, match=r"not installed as a package.*pip install --no-deps"):
        require_registered()
