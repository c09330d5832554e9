"""How vLLM finds the plugin: by the entry point of an installed distribution, which a checkout on PYTHONPATH lacks."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from caovan_kernels import vllm as plugin_package

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def test_the_installed_entry_point_is_the_one_pyproject_declares() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"][plugin_package.ENTRY_POINT_GROUP]
    assert plugin_package.registered_entry_point() == declared[plugin_package.ENTRY_POINT_NAME]
    assert plugin_package.require_registered() == declared[plugin_package.ENTRY_POINT_NAME]


def test_without_an_installed_distribution_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a source checkout merely on PYTHONPATH looks like: vLLM's other plugins, none of ours.
    others = metadata.EntryPoints([metadata.EntryPoint("lora_filesystem_resolver", "vllm.plugins:x",
                                                       plugin_package.ENTRY_POINT_GROUP)])
    monkeypatch.setattr(plugin_package.metadata, "entry_points", lambda group: others)
    assert plugin_package.registered_entry_point() is None
    with pytest.raises(plugin_package.PluginNotInstalled, match=r"not installed as a package.*pip install --no-deps"):
        plugin_package.require_registered()
