"""The folder tree tells the truth: no import cycle, and no module imports one on a higher floor.

Floors, bottom to top (a module may import its own floor and those below). A function-level import counts too: it
is a dependency all the same, only a later one.
"""

from __future__ import annotations

import pytest

from .imports import cycles, edges, floor_of, modules

PACKAGES = ("caovan_kernels", "caovan_demo", "caovan_manager")

FLOORS: list[tuple[str, ...]] = [
    # The plugin vLLM loads: the contract with the daemon and the plugin's errors at the ground.
    ("caovan_kernels.contract", "caovan_kernels.errors", "caovan_kernels"),
    ("caovan_kernels.turing", "caovan_kernels.tensorcore75", "caovan_kernels.gdn", "caovan_kernels.profile"),
    ("caovan_kernels.vllm",),
    ("caovan_kernels.doctor", "caovan_kernels.serve", "caovan_kernels.vllm_cli"),
    # The demo models: built from the contract's names, used by the daemon's composition root and CLI only.
    ("caovan_demo",),
    # The daemon: generic pieces at the ground, the composition root and the CLI at the top.
    ("caovan_manager", "caovan_manager.errors", "caovan_manager.masking", "caovan_manager.broadcaster",
     "caovan_manager.inbox", "caovan_manager.gpu"),
    ("caovan_manager.config",),
    ("caovan_manager.store", "caovan_manager.keys"),
    ("caovan_manager.logwatch", "caovan_manager.plugins"),
    ("caovan_manager.supervisor",),
    ("caovan_manager.metrics",),
    ("caovan_manager.proxy",),
    ("caovan_manager.engine",),
    ("caovan_manager.models",),
    ("caovan_manager.api",),
    ("caovan_manager.daemon", "caovan_manager.app"),
    ("caovan_manager.cli",),
]

GRAPH = edges(PACKAGES)


def test_every_module_has_a_floor():
    assert [name for name in modules(PACKAGES) if floor_of(name, FLOORS) is None] == []


def test_the_import_graph_has_no_cycle():
    assert cycles(GRAPH) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_a_higher_floor(package):
    upward = [f"{edge.source}:{edge.line} imports {edge.target}" for edge in GRAPH
              if edge.source.startswith(package) and floor_of(edge.target, FLOORS) > floor_of(edge.source, FLOORS)]
    assert upward == []
