"""The package's modules import one another without circles (DESIGN.md's layers: a module
never needs one that needs it), imports inside functions included: a lazy import is still
a dependency, and circles came back through them before."""

from __future__ import annotations

import ast
from pathlib import Path

from paths import ROOT as REPO

PACKAGE = "spark_statestore"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package to the package's modules it imports (anywhere in it)."""
    modules = {_module_name(p, root): p for p in (root / PACKAGE).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for alias in node.names:  # `from pkg import module` depends on the module alone
                    targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
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
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_circles() -> None:
    graph = import_graph(REPO)
    assert len(graph) > 100  # the whole package was read
    assert circles(graph) == []


def test_a_circle_through_a_lazy_import_is_found(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE / "inner"
    package.mkdir(parents=True)
    (tmp_path / PACKAGE / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from spark_statestore.inner.b import thing\n")
    (package / "b.py").write_text("def thing():\n    from . import a\n")
    (package / "c.py").write_text("from spark_statestore.inner import a\n")
    graph = import_graph(tmp_path)
    assert graph["spark_statestore.inner.b"] == {"spark_statestore.inner.a"}
    assert circles(graph) == [["spark_statestore.inner.a", "spark_statestore.inner.b"]]
