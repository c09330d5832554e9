"""The vLLM plugin: loaded by vLLM in every process through the `vllm.general_plugins` entry point."""

from __future__ import annotations

from importlib import metadata

from caovan_kernels.errors import PluginNotInstalled

ENTRY_POINT_GROUP = "vllm.general_plugins"
ENTRY_POINT_NAME = "caovan"


def registered_entry_point() -> str | None:
    """The `module:function` vLLM will load as this plugin, or None when no installed distribution declares it.

    vLLM finds plugins by entry point only: a source checkout that is merely on PYTHONPATH imports fine and is never
    loaded, so every engine runs stock."""
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == ENTRY_POINT_NAME:
            return entry.value
    return None


def require_registered() -> str:
    """registered_entry_point(), or PluginNotInstalled saying what to do."""
    entry = registered_entry_point()
    if entry is None:
        raise PluginNotInstalled(
            f"caovan imports here but is not installed as a package, so vLLM will not load its plugin (vLLM finds "
            f"plugins by their {ENTRY_POINT_GROUP} entry point): install it (pip install --no-deps ., or a wheel of "
            f"it built elsewhere) and start again")
    return entry
