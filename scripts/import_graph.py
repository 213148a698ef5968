"""The project's import graph, from the source (every import statement, including those inside
functions and under TYPE_CHECKING), with the cycles in it.

    .venv/bin/python scripts/import_graph.py           # rooms (layers) and the arrows between them
    .venv/bin/python scripts/import_graph.py --modules # every module-to-module arrow

tests/house/test_architecture.py holds the project to it: no cycle, and arrows only in the one
direction the architecture notes draw.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "apikeys",
    "batches",
    "catalog",
    "config",
    "dashboard",
    "inference",
    "storedresponses",
)
# The rooms, most outward first. An app's admin and management commands are edges of their
# own (for people and shells); every other package is one room.
ROOMS = (
    "catalog.admin",
    "catalog.management",
    "apikeys.admin",
    "apikeys.management",
    "storedresponses.admin",
    "storedresponses.management",
    "batches.admin",
    "inference.edge",
    "inference.views",
    "inference.responses_views",
    "inference.control_views",
    "inference.urls",
    "inference.management",
    "inference.batches",
    "inference.openapi",
    "inference.serving",
    "inference.observability",
    "inference.runtime",
    "inference.protocol",
    "inference.engine",
    "inference.adapters",
    "inference.conversion",
    "inference.blas",
)


def module_files() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports_of(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """Project modules that `name` imports (a `from package import module` names the module)."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                targets.add(child if child in known else base)
    return {t for t in targets if t in known and t != name}


def module_graph() -> dict[str, set[str]]:
    known = module_files()
    return {name: imports_of(path, name, known) for name, path in known.items()}


def room_of(module: str) -> str:
    for room in ROOMS:
        if module == room or module.startswith(room + "."):
            return room
    return module.split(".")[0]


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        for target in targets:
            if room_of(source) != room_of(target):
                rooms[room_of(source)].add(room_of(target))
    return rooms


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modules", action="store_true", help="module arrows, not rooms")
    args = parser.parse_args()
    graph = module_graph()
    shown = graph if args.modules else room_graph(graph)
    for source in sorted(shown):
        print(f"{source} -> {', '.join(sorted(shown[source])) or '(nothing)'}")
    found = cycles(graph) + cycles(room_graph(graph))
    arrows = sum(map(len, graph.values()))
    print(f"\nmodules: {len(graph)}, arrows: {arrows}, cycles (modules and rooms): {len(found)}")
    for component in found:
        print("  cycle:", " <-> ".join(component))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
