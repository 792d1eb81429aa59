"""The layer rules of kinetic_core (issue 32) as plain functions over source text.

They take ``{path: source}`` rather than reading the tree themselves, so a test can plant a
violation in a copy of the real sources and see the rule report exactly that line. Every
rule returns its violations as messages naming ``file:line``; an empty list means it holds.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

FACADE = "kinetic_core"
BACKENDS = "kinetic_core.backends"
RUNTIME = "kinetic_core.runtime"
STORAGE = "kinetic_core.storage"

#: Layer unit -> rank, low to high: a module imports only its own rank or lower.
RANKS: dict[str, int] = {
    "kinetic_core.errors": 0,
    "kinetic_core.states": 0,
    "kinetic_core.util": 1,
    "kinetic_core.storage": 2,
    "kinetic_core.config": 2,
    "kinetic_core.records": 3,
    "kinetic_core.data": 4,
    "kinetic_core.runtime": 5,
    "kinetic_core.backends": 6,
    "kinetic_core.control": 7,
    "kinetic_core.jobs": 8,
    "kinetic_core.batch": 9,
    "kinetic_core.ops": 10,
    FACADE: 11,
    "kinetic_core.cli": 12,
    "kinetic_core.ui": 12,
}

#: The one upward import allowed: the facade re-exports ``dashboard_app`` from the ui, lazily
#: (by name in ``_EXPORTS``, and under ``TYPE_CHECKING``), so it is no edge of the unit graph.
FACADE_REEXPORTS_UI = (FACADE, "kinetic_core.ui")

#: What the runtime, on every job's critical path, must never import.
RUNTIME_NEVER: frozenset[str] = frozenset(
    {
        BACKENDS,
        "kinetic_core.control",
        "kinetic_core.ops",
        "kinetic_core.jobs",
        "kinetic_core.batch",
    }
)

#: Everything storage may import: it sits under config, records and all the rest.
STORAGE_MAY: frozenset[str] = frozenset({STORAGE, "kinetic_core.util", "kinetic_core.errors"})


@dataclass(frozen=True)
class Import:
    """One kinetic_core module named by an import statement, and where that statement is."""

    file: str  # relative to the repository root, e.g. kinetic_core/jobs/listing.py
    line: int
    importer: str  # the module whose file it is
    target: str  # the most specific module imported: ``from p import m`` names ``p.m``
    via: str | None = None  # ``p`` of ``from p import m``: runs too, counted for module cycles

    @property
    def where(self) -> str:
        """``file:line``, the way every message names the statement to change."""
        return f"{self.file}:{self.line}"


def read_sources(root: Path, folder: str = FACADE) -> dict[str, str]:
    """``{path relative to root: source}`` of every module under ``root/folder``."""
    return {
        path.relative_to(root).as_posix(): path.read_text()
        for path in sorted((root / folder).rglob("*.py"))
    }


def module_of(file: str) -> str:
    """``kinetic_core/jobs/listing.py`` -> ``kinetic_core.jobs.listing``; a package is its folder."""
    parts = file.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """The layer unit a module belongs to: the facade, or ``kinetic_core.<top-level name>``."""
    return ".".join(module.split(".")[:2])


def rank_of(module: str) -> int | None:
    """The module's rank, or None for a unit RANKS does not know (a new top-level name)."""
    return RANKS.get(unit_of(module))


def _resolve(base: str, name: str, modules: frozenset[str]) -> tuple[str, str | None]:
    """What ``from base import name`` imports: the submodule if it is one, else ``base``."""
    sub = f"{base}.{name}"
    return (sub, base) if sub in modules else (base, None)


def find_imports(sources: Mapping[str, str]) -> list[Import]:
    """Every kinetic_core import anywhere in each file: module level, in functions, type-only.

    Only statements count; a module name in a string (``util/moved.py``) imports nothing.
    """
    modules = frozenset(module_of(file) for file in sources)
    return [imp for file, text in sources.items() for imp in _file_imports(file, text, modules)]


@functools.cache
def _file_imports(file: str, text: str, modules: frozenset[str]) -> tuple[Import, ...]:
    """One file's imports; cached, since a planted copy differs from the tree in one file."""
    importer = module_of(file)
    package = importer if file.endswith("/__init__.py") else importer.rpartition(".")[0]
    found: dict[Import, None] = {}  # one per statement and module, in order
    for node in ast.walk(ast.parse(text, filename=file)):
        if isinstance(node, ast.Import):
            targets: list[tuple[str, str | None]] = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            targets = [_resolve(base, alias.name, modules) for alias in node.names]
        else:
            continue
        for target, via in targets:
            if target == FACADE or target.startswith(f"{FACADE}."):
                found[Import(file, node.lineno, importer, target, via)] = None
    return tuple(found)


def _components(graph: Mapping[str, set[str]]) -> dict[str, int]:
    """Each node's strongly connected component (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    component: dict[str, int] = {}
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component[member] = index[node]
                        if member == node:
                            break
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return component


def _path(graph: Mapping[str, set[str]], start: str, goal: str) -> list[str]:
    """A shortest path ``start`` -> ``goal`` (breadth first); it exists inside a component."""
    before: dict[str, str] = {start: start}
    queue = [start]
    for node in queue:
        if node == goal:
            break
        for child in sorted(graph[node]):
            if child not in before:
                before[child] = node
                queue.append(child)
    path = [goal]
    while path[-1] != start:
        path.append(before[path[-1]])
    return path[::-1]


def _cycles(edges: Iterable[tuple[str, str, Import]]) -> list[tuple[Import, list[str]]]:
    """The imports that close a cycle, each with the cycle (its nodes, from importer round).

    Every edge inside a strongly connected component lies on a cycle; of those, the ones
    that go up in rank are the ones to cut (the rest follow the layers), and inside one
    rank (a cycle between modules of one package, or storage and config) it is all of them.
    """
    kept = [(a, b, imp) for a, b, imp in edges if a != b]
    graph: dict[str, set[str]] = {}
    for a, b, _ in kept:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    component = _components(graph)
    inside = [(a, b, imp) for a, b, imp in kept if component[a] == component[b]]
    upward = {component[a] for a, b, _ in inside if (rank_of(b) or 0) > (rank_of(a) or 0)}
    return [
        (imp, [a, *_path(graph, b, a)])
        for a, b, imp in inside
        if component[a] not in upward or (rank_of(b) or 0) > (rank_of(a) or 0)
    ]


def unit_cycles(imports: Iterable[Import]) -> list[str]:
    """Rule 1: the layer units (errors, states, each package, the facade) form no cycle."""
    edges = [
        (unit_of(imp.importer), unit_of(imp.target), imp)
        for imp in imports
        if (unit_of(imp.importer), unit_of(imp.target)) != FACADE_REEXPORTS_UI
    ]
    return [
        f"{imp.where} imports {imp.target}, closing a cycle between layer units: "
        + " -> ".join(cycle)
        for imp, cycle in _cycles(edges)
    ]


def upward_imports(imports: Iterable[Import], modules: set[str]) -> list[str]:
    """Rule 2: a module imports only its own rank or lower (the facade may import the ui)."""
    found = [
        f"{module} is in no layer: give {unit_of(module)} a rank in RANKS"
        for module in sorted(modules)
        if rank_of(module) is None
    ]
    for imp in imports:
        mine, theirs = rank_of(imp.importer), rank_of(imp.target)
        if mine is None:
            continue
        if imp.target not in modules or theirs is None:
            found.append(f"{imp.where} imports {imp.target}, which is no module of kinetic_core/")
        elif theirs > mine and (unit_of(imp.importer), unit_of(imp.target)) != FACADE_REEXPORTS_UI:
            found.append(
                f"{imp.where} imports {imp.target} (rank {theirs}) from "
                f"{unit_of(imp.importer)} (rank {mine}): a module imports only its own rank "
                "or lower"
            )
    return found


def facade_imported_from_below(imports: Iterable[Import]) -> list[str]:
    """Rule 3: nothing below the facade imports it (it imports everything, lazily)."""
    below = RANKS[FACADE]
    return [
        f"{imp.where} imports the facade kinetic_core from {unit_of(imp.importer)}: "
        "nothing below the facade imports it"
        for imp in imports
        if imp.target == FACADE and (rank_of(imp.importer) or 0) < below
    ]


def backend_internals_imported_outside(imports: Iterable[Import]) -> list[str]:
    """Rule 4: one backend's modules are imported only inside kinetic_core/backends/."""
    return [
        f"{imp.where} imports {imp.target} from {unit_of(imp.importer)}: a backend's own "
        "modules are imported only inside kinetic_core/backends/ (use the protocol package)"
        for imp in imports
        if imp.target.startswith(f"{BACKENDS}.") and unit_of(imp.importer) != BACKENDS
    ]


def runtime_imports_above_it(imports: Iterable[Import]) -> list[str]:
    """Rule 5: the runtime, on every job's critical path, imports no backend or control code."""
    return [
        f"{imp.where} imports {imp.target}: the runtime never imports "
        "backends, control, ops, jobs or batch"
        for imp in imports
        if unit_of(imp.importer) == RUNTIME and unit_of(imp.target) in RUNTIME_NEVER
    ]


def storage_imports_beyond_util(imports: Iterable[Import]) -> list[str]:
    """Rule 6: storage imports only util and errors (and itself)."""
    return [
        f"{imp.where} imports {imp.target}: storage imports only util and errors"
        for imp in imports
        if unit_of(imp.importer) == STORAGE and unit_of(imp.target) not in STORAGE_MAY
    ]


def past_the_allow_list(imports: Iterable[Import], allowed: Mapping[str, set[str]]) -> list[str]:
    """Rule 7: cli and ui import the facade, their own package and their allow-list only."""
    return [
        f"{imp.where} imports {imp.target}: {unit_of(imp.importer)} imports the facade, "
        "itself and ALLOWED only"
        for imp in imports
        if unit_of(imp.importer) in allowed
        and imp.target != FACADE
        and unit_of(imp.target) != unit_of(imp.importer)
        and imp.target not in allowed[unit_of(imp.importer)]
    ]


def stale_allowances(imports: Iterable[Import], allowed: Mapping[str, set[str]]) -> list[str]:
    """Rule 7's other half: an allow-list entry no code needs any more is taken out."""
    used = {(unit_of(imp.importer), imp.target) for imp in imports}
    return [
        f"ALLOWED[{unit!r}] lists {target}, which {unit} no longer imports: take it out"
        for unit, targets in allowed.items()
        for target in sorted(targets)
        if (unit, target) not in used
    ]


def module_cycles(imports: Iterable[Import]) -> list[str]:
    """Rule 8: no import cycle between kinetic_core's modules, counting every import.

    The facade's own imports are left out: it re-exports lazily, so nothing loads through it.
    ``from p import m`` is an edge to ``p`` too, since ``p`` runs first.
    """
    edges = [
        (imp.importer, target, imp)
        for imp in imports
        if imp.importer != FACADE
        for target in (imp.target, imp.via)
        if target is not None
    ]
    return [
        f"{imp.where} imports {imp.target}, closing an import cycle: " + " -> ".join(cycle)
        for imp, cycle in _cycles(edges)
    ]


def provider_imports_past_the_api(sources: Mapping[str, str], public: set[str]) -> list[str]:
    """Rule 8: providers use kinetic_core's public names only (``__all__``, imported as kc)."""
    offenders: list[str] = []
    for file, text in sources.items():
        for node in ast.walk(ast.parse(text, filename=file)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(FACADE):
                if node.module != FACADE or any(a.name not in public for a in node.names):
                    offenders.append(f"{file}:{node.lineno}")
            elif isinstance(node, ast.Import):
                offenders += [
                    f"{file}:{node.lineno}" for a in node.names if a.name.startswith(f"{FACADE}.")
                ]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "kc"
                and node.attr not in public
            ):
                offenders.append(f"{file}:{node.lineno} kc.{node.attr}")
    return [f"{where}: providers use only kinetic_core.__all__" for where in offenders]


def top_level_entries(root: Path) -> list[str]:
    """The files and folders directly in kinetic_core/, less ``__pycache__``."""
    return sorted(p.name for p in (root / FACADE).iterdir() if p.name != "__pycache__")


def too_many_top_level(entries: list[str], most: int = 16) -> list[str]:
    """Rule 9: kinetic_core/ keeps at most ``most`` entries, so its layers stay readable."""
    if len(entries) <= most:
        return []
    return [f"kinetic_core/ has {len(entries)} entries, at most {most}: {', '.join(entries)}"]
