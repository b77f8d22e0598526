"""The package's layers, checked on its import graph (every import, function-local and
type-checking ones included): no module imports one that imports it back, the pure layers load
no HTTP stack, and a layer imports only the layers below it (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "preemption_operator"
HTTP_STACK = {"aiohttp", "httpx2", "lightkube", "prometheus_client", "msgspec"}

LAYERS: dict[str, set[str]] = {
    "api": set(),
    "engine": {"api"},
    "jobs": {"api", "engine"},
    "lint": {"api", "engine"},
    "k8s": {"api"},
    "offline": {"api", "engine", "jobs", "k8s"},
    "controller": {"api", "engine", "jobs", "lint", "k8s"},
    "testing": {"api", "engine", "k8s", "offline"},
    "kubectl": {"api", "engine", "k8s", "offline"},
}
"""What each subpackage may import of the others (beside itself)."""
PURE = ("api", "engine", "jobs", "lint")
"""No I/O and no Kubernetes client: simulate, explain and lint load none of it."""
ROOT_MODULES = {"__init__", "__main__", "cli", "logs"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every module `name` imports: project modules by their full name, others by their top name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = set()
        for target in _imports(name, path):
            while target and target not in MODULES and target.startswith("preemption_operator"):
                target = target.rpartition(".")[0]
            if target != name:
                targets.add(target)
        graph[name] = targets
    return graph


GRAPH = _graph()


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] not in ROOT_MODULES) else "<root>"


def test_no_module_imports_one_that_imports_it_back() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH.get(v, ()):
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert cycles == []


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = []
    for module, targets in sorted(GRAPH.items()):
        layer = _layer(module)
        if layer not in LAYERS:
            continue
        for target in sorted(targets):
            other = _layer(target) if target.startswith("preemption_operator") else None
            if other is not None and other != layer and other not in LAYERS[layer]:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_the_pure_layers_load_no_http_stack() -> None:
    wrong = [
        f"{module} imports {target}"
        for module, targets in sorted(GRAPH.items())
        if _layer(module) in PURE
        for target in sorted(targets)
        if target.split(".")[0] in HTTP_STACK
    ]
    assert wrong == []


def test_the_package_root_holds_only_the_entry_points_and_shared_modules() -> None:
    at_root = {path.stem for path in PACKAGE.glob("*.py")}
    assert at_root == ROOT_MODULES


def test_nothing_under_benchmarks_or_hack_edits_sys_path() -> None:
    edits = [
        str(path.relative_to(ROOT))
        for folder in ("benchmarks", "hack")
        for path in (ROOT / folder).rglob("*.py")
        if re.search(r"sys\.path\.(insert|append|extend)|sys\.path\s*\+?=", path.read_text())
    ]
    assert edits == []


def test_kopf_is_named_nowhere_in_code_tests_or_packaging() -> None:
    named = [
        str(path.relative_to(ROOT))
        for pattern in ("operator/**/*.py", "tests/**/*.py", "benchmarks/**/*.py", "hack/**/*", "pyproject.toml")
        for path in ROOT.glob(pattern)
        if path.is_file() and path != Path(__file__).resolve() and "kopf" in path.read_text(errors="ignore").lower()
    ]
    assert named == []
