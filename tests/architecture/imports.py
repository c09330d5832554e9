"""The project's import graph, read from the source with `ast` (nothing is imported): every `import` of the
project's own modules, at module level or inside a function, except those under `if TYPE_CHECKING:`."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    in_function: bool


def modules(packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages."""
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def edges(packages: Iterable[str]) -> list[Edge]:
    known = modules(packages)

    def resolve(source: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = source.split(".")[: len(source.split(".")) - (0 if is_package else 1)]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        targets = []
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != source:
                targets.append(name)
        return targets

    found: list[Edge] = []
    for source, path in known.items():
        is_package = path.name == "__init__.py"

        def walk(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    found.extend(Edge(source, target, child.lineno, in_function)
                                 for target in resolve(source, is_package, child))
                elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue  # annotations only: no import at run time
                else:
                    walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

        walk(ast.parse(path.read_text()), False)
    return found


def cycles(graph: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    successors: dict[str, set[str]] = {}
    for edge in graph:
        successors.setdefault(edge.source, set()).add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(successors.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(successors):
        if node not in index:
            visit(node)
    return components


def floor_of(module: str, floors: list[tuple[str, ...]]) -> int | None:
    """The floor of the longest entry that names the module: `a.b` names a.b and everything below it, `a.*` the
    whole package a, and a bare top-level name `a` only a's own __init__ (so a new subpackage must be placed)."""
    best, best_len = None, -1
    for level, entries in enumerate(floors):
        for entry in entries:
            if entry.endswith(".*"):
                root = entry[:-2]
                hit = module == root or module.startswith(root + ".")
            elif "." in entry:
                hit = module == entry or module.startswith(entry + ".")
            else:
                hit = module == entry
            if hit and len(entry) > best_len:
                best, best_len = level, len(entry)
    return best
