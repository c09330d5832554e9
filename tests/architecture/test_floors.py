"""The folder tree tells the truth: no import cycle, and no module imports one on a higher floor.

Floors, bottom to top (a module may import its own floor and those below). A function-level import counts too: it
is a dependency all the same, only a later one. A function-level import of the project's own modules is kept only
where it defers a heavy import (torch, Triton, vLLM) or a module that loads one; the comment beside it says which.
"""

from __future__ import annotations

import ast

import pytest

from .imports import cycles, edges, floor_of, modules

PACKAGES = ("caovan_kernels", "caovan_demo", "caovan_manager", "lab")

FLOORS: list[tuple[str, ...]] = [
    # The plugin vLLM loads: the contract with the daemon, the errors and the logger at the ground; the kernels and the
    # launch profile in the middle; the wiring into vLLM above them; the commands on top.
    ("caovan_kernels", "caovan_kernels.contract", "caovan_kernels.errors", "caovan_kernels.logger"),
    ("caovan_kernels.profile", "caovan_kernels.turing", "caovan_kernels.draft_vocab"),
    ("caovan_kernels.tensorcore75",),
    ("caovan_kernels.gdn", "caovan_kernels.attention"),
    ("caovan_kernels.vllm",),
    ("caovan_kernels.doctor", "caovan_kernels.serve", "caovan_kernels.vllm_cli"),
    # The demo models: built from the contract's names, used by the daemon's composition root and CLI only.
    ("caovan_demo.*",),
    # The daemon: generic pieces at the ground, the composition root and the CLI at the top.
    ("caovan_manager", "caovan_manager.errors", "caovan_manager.masking", "caovan_manager.broadcaster",
     "caovan_manager.inbox", "caovan_manager.gpu"),
    ("caovan_manager.config",),
    ("caovan_manager.store", "caovan_manager.keys"),
    ("caovan_manager.logwatch", "caovan_manager.plugins", "caovan_manager.canary"),
    ("caovan_manager.supervisor",),
    ("caovan_manager.metrics",),
    ("caovan_manager.proxy",),
    ("caovan_manager.engine",),
    ("caovan_manager.models",),
    ("caovan_manager.api",),
    ("caovan_manager.daemon", "caovan_manager.app"),
    ("caovan_manager.cli",),
    # Developer tools (measurements, fitness checks): outside the wheel, so nothing shipped may import them.
    ("lab.*",),
]

GRAPH = edges(PACKAGES)


def test_every_module_has_a_floor():
    assert [name for name in modules(PACKAGES) if floor_of(name, FLOORS) is None] == []


def test_the_demo_builder_is_reached_only_from_the_top_and_only_when_a_model_is_built():
    """Training a model needs torch: only the composition root and the CLI may start it, inside the function that
    builds (resolving a launch target must never train one unasked)."""
    reaching = [edge for edge in GRAPH
                if edge.target.startswith("caovan_demo") and edge.source.startswith("caovan_manager")]
    assert sorted({edge.source for edge in reaching}) == ["caovan_manager.cli.demo_model", "caovan_manager.daemon"]
    assert [f"{edge.source}:{edge.line}" for edge in reaching if not edge.in_function] == []


def test_the_import_graph_has_no_cycle():
    assert cycles(GRAPH) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_a_higher_floor(package):
    upward = [f"{edge.source}:{edge.line} imports {edge.target}" for edge in GRAPH
              if edge.source.startswith(package) and floor_of(edge.target, FLOORS) > floor_of(edge.source, FLOORS)]
    assert upward == []


def test_a_function_level_import_of_our_own_modules_says_why():
    """Each one in the shipped packages has a comment naming the heavy import it defers: on its line, or between the
    start of its function and it."""
    sources = modules(PACKAGES)
    silent = []
    for source, line in sorted({(edge.source, edge.line) for edge in GRAPH
                                if edge.in_function and not edge.source.startswith("lab")}):
        text = sources[source].read_text()
        opened = max(node.lineno for node in ast.walk(ast.parse(text))  # the innermost function holding the import
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and node.lineno < line <= node.end_lineno)
        lines = text.splitlines()
        if not any("#" in lines[at] for at in range(opened, line)):
            silent.append(f"{source}:{line}: {lines[line - 1].strip()}")
    assert silent == [], "\n".join(silent)


def test_no_two_classes_of_the_shipped_packages_share_a_name():
    """One name per thing: a grep for a class finds the one it means."""
    defined: dict[str, list[str]] = {}
    for name, path in modules(PACKAGES).items():
        if name.startswith("lab"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(name)
    assert {cls: where for cls, where in defined.items() if len(where) > 1} == {}


def test_no_module_renames_our_own_names_on_import():
    """`import x as y` of the project's own modules or names hides them from a grep."""
    renamed = []
    for name, path in modules(PACKAGES).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES):
                renamed += [f"{name}:{node.lineno} {alias.name} as {alias.asname}" for alias in node.names
                            if alias.asname and alias.asname != alias.name]
            elif isinstance(node, ast.Import):
                renamed += [f"{name}:{node.lineno} {alias.name} as {alias.asname}" for alias in node.names
                            if alias.asname and alias.name.split(".")[0] in PACKAGES]
    assert renamed == [], "\n".join(renamed)
