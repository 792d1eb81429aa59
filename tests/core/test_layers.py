"""The architecture holds: kinetic_core imports form no cycle (counting function-local and
type-only imports), and providers import only kinetic_core's public names."""

from __future__ import annotations

import ast
from pathlib import Path

import kinetic_core

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "kinetic_core"
PROVIDERS = ROOT / "providers"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, package: str) -> set[str]:
    """Every kinetic_core module ``path`` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("kinetic_core")}


def core_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in CORE.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m in imported_modules(path, package) if m in files and m != name}
    return graph


def test_core_import_graph_has_no_cycle() -> None:
    graph = core_graph()
    graph["kinetic_core"] = set()  # the facade re-exports lazily; nothing imports it back
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, f"import cycles in kinetic_core: {cycles}"


def test_bottom_layers_import_nothing_above_them() -> None:
    graph = core_graph()
    assert graph["kinetic_core.errors"] == set()
    assert graph["kinetic_core.records.layout"] <= {"kinetic_core.util.ids"}
    assert graph["kinetic_core.states"] == set()
    for module in (
        "kinetic_core.control.resolution",
        "kinetic_core.control.polling",
        "kinetic_core.runtime.runner",
    ):
        assert not graph[module] & {
            "kinetic_core.jobs.handle",
            "kinetic_core.jobs.submission",
            "kinetic_core.batch",
            "kinetic_core.cli",
        }, f"{module} imports upward: {graph[module]}"


def test_providers_use_only_the_public_core_api() -> None:
    public = set(kinetic_core.__all__)
    offenders = []
    for path in PROVIDERS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kinetic_core"):
                if node.module != "kinetic_core" or any(a.name not in public for a in node.names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.Import):
                offenders += [
                    f"{path.relative_to(ROOT)}:{node.lineno}"
                    for a in node.names
                    if a.name.startswith("kinetic_core.")
                ]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "kc"
                and node.attr not in public
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} kc.{node.attr}")
    assert not offenders, f"providers reach past the public API: {offenders}"
