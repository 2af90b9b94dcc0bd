"""No import cycle in kvspill: not between files, not between first-level packages.

The graph comes from the AST of every file under kvspill/ and counts every import: at module
level, inside functions and under `if TYPE_CHECKING:` (a cycle kept legal by a type-only import is
a satellite that needs its parent's type: a cycle in disguise, docs/STYLE.md). An edge goes from a
file to the most specific kvspill module an import names (`from kvspill.plan import units` ->
kvspill.plan.units; `from kvspill.plan import compute_plan` -> kvspill.plan, its `__init__`).

Invariants:
- File level: no strongly connected component of more than one module.
- Package level: a file's node is its first-level package (`kvspill.cli.main` -> `kvspill.cli`);
  a module at the package root (`kvspill.config`) is its own node; `kvspill` itself (its
  `__init__`) is a node too. No strongly connected component of more than one node.
- Nothing is allowed: there is no list of known cycles. The self-tests below feed a tiny synthetic
  graph through the same functions, so the test cannot pass by finding no edges at all.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "kvspill"
ROOT = "kvspill"

Graph = dict[str, set[str]]


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    """`kvspill/plan/units.py` -> `kvspill.plan.units`; `kvspill/plan/__init__.py` -> `kvspill.plan`."""
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterable[str]:
    """Every dotted name an import in `tree` can bind: `from a import b` gives `a.b` and `a`."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                yield f"{base}.{alias.name}"


def resolve(name: str, modules: set[str]) -> str | None:
    """The most specific module of `modules` that dotted `name` is or lies in; None outside them."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def file_graph(package_dir: Path = PACKAGE_DIR) -> Graph:
    """Module -> the modules of the package it imports (self-imports left out)."""
    paths = sorted(package_dir.rglob("*.py"))
    modules = {module_name(p, package_dir): p for p in paths}
    names = set(modules)
    graph: Graph = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name in _imported_names(tree, module, path.name == "__init__.py"):
            target = resolve(name, names)
            if target is not None and target != module:
                graph[module].add(target)
    return graph


def package_of(module: str) -> str:
    """First-level package of `module`; a module at the root (or the root itself) is its own node."""
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph(graph: Mapping[str, set[str]]) -> Graph:
    """The file graph folded onto first-level packages (edges inside one package dropped)."""
    out: Graph = {package_of(m): set() for m in graph}
    for source, targets in graph.items():
        for target in targets:
            a, b = package_of(source), package_of(target)
            if a != b:
                out[a].add(b)
    return out


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node, each sorted (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(iter(children), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def describe(components: list[list[str]], graph: Mapping[str, set[str]]) -> str:
    """Each cycle with the edges that close it, one `a -> b` per line."""
    lines = []
    for component in components:
        members = set(component)
        lines.append("cycle: " + ", ".join(component))
        for source in component:
            for target in sorted(graph[source] & members):
                lines.append(f"    {source} -> {target}")
    return "\n".join(lines)


def _write_tiny_package(tmp_path: Path) -> Path:
    """kvspill/{a.py, b/__init__.py, b/c.py, d.py}: a -> b.c (in a function), b.c -> a (type-only),
    d -> a: one file cycle {a, b.c} and one package cycle {kvspill.a, kvspill.b}."""
    pkg = tmp_path / ROOT
    (pkg / "b").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from kvspill.b.c import g\n    return g\n")
    (pkg / "b" / "__init__.py").write_text("")
    (pkg / "b" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvspill import a\ndef g(): ...\n"
    )
    (pkg / "d.py").write_text("from . import a\n")
    return pkg


def test_self_check_finds_a_cycle_hidden_in_functions_and_type_checking(tmp_path: Path) -> None:
    graph = file_graph(_write_tiny_package(tmp_path))
    assert graph["kvspill.a"] == {"kvspill.b.c"}
    assert graph["kvspill.b.c"] == {"kvspill.a"}
    assert graph["kvspill.d"] == {"kvspill.a"}
    assert cycles(graph) == [["kvspill.a", "kvspill.b.c"]]
    assert "kvspill.b.c -> kvspill.a" in describe(cycles(graph), graph)
    assert cycles(package_graph(graph)) == [["kvspill.a", "kvspill.b"]]


def test_self_check_on_a_graph() -> None:
    graph = {"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}, "v": set()}
    assert cycles(graph) == [["x", "y", "z"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_the_real_graph_is_not_empty() -> None:
    graph = file_graph()
    assert len(graph) > 100
    assert "kvspill.config" in graph["kvspill.engine.core"] or any(
        t.startswith("kvspill.config") for t in graph["kvspill.engine.core"]
    )


def test_no_import_cycle_between_files() -> None:
    graph = file_graph()
    found = cycles(graph)
    assert not found, "import cycles between files:\n" + describe(found, graph)


def test_no_import_cycle_between_packages() -> None:
    graph = package_graph(file_graph())
    found = cycles(graph)
    assert not found, "import cycles between first-level packages:\n" + describe(found, graph)
