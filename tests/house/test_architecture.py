"""The house rules the architecture notes state, checked on the source: one direction of flow,
no import cycles, small functions, and every URL declared once at the edge."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from tests.support.helpers import ROOT

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

APPS = ("apikeys", "batches", "catalog", "config", "dashboard", "inference", "storedresponses")
LONGEST_FUNCTION = 60


def load_import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts/import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


import_graph = load_import_graph()
GRAPH = import_graph.module_graph()


def test_the_module_and_room_graphs_have_no_cycle():
    assert import_graph.cycles(GRAPH) == []
    assert import_graph.cycles(import_graph.room_graph(GRAPH)) == []


@pytest.mark.parametrize(
    "room, forbidden",
    [
        # The engine owns MLX and knows nothing above it: no Django, settings, ORM or HTTP;
        # nor model families or templates: serving renders and tokenizes (serving/prepare.py).
        (
            "inference.engine",
            r"^(django|config|catalog|apikeys|dashboard|jinja2)"
            r"|^inference\.(runtime|serving|edge|protocol|observability|views|adapters)",
        ),
        (
            "inference.adapters",
            r"^(django|config|catalog|apikeys)|^inference\.(runtime|serving|edge|engine)",
        ),
        (
            "inference.protocol",
            r"^(django|catalog|apikeys)|^inference\.(runtime|serving|edge|engine)",
        ),
        ("inference.serving", r"^inference\.(edge|views|control_views)"),
        ("apikeys", r"^inference"),
        # Stored responses are kept by the app and read by serving, never the other way.
        ("storedresponses", r"^inference"),
        # Files and batches likewise: the runner that calls serving is inference.batches.
        ("batches", r"^inference"),
    ],
)
def test_arrows_point_one_way(room, forbidden):
    wrong = []
    for module, path in import_graph.module_files().items():
        if import_graph.room_of(module) != room:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            wrong += [f"{module} imports {n}" for n in names if re.search(forbidden, n)]
    assert wrong == []


SERVING = ROOT / "inference/serving"
# Serving's dialect packages: each holds its dialect's plan builders and reply writers, and
# exports its Dialect from dialect.py.
DIALECTS = sorted(p.parent.name for p in SERVING.glob("*/dialect.py"))


def dialect_of(module: str) -> str | None:
    """The dialect package `module` belongs to; None for serving's shared core (or outside)."""
    parts = module.split(".")
    if parts[:2] == ["inference", "serving"] and len(parts) > 2 and parts[2] in DIALECTS:
        return parts[2]
    return None


def test_the_dialect_packages_are_found():
    assert {"openai", "anthropic", "ollama", "responses"} <= set(DIALECTS)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_package_is_shaped_alike(dialect):
    """Where Anthropic's writer is, its path says: every dialect package holds its Dialect
    (dialect.py), its plan builder (request → neutral Plan) and its reply writer (neutral
    events → its wire), each a module or a package of them."""
    package = SERVING / dialect
    missing = [
        part
        for part in ("plan", "writer")
        if not ((package / f"{part}.py").is_file() or (package / part / "__init__.py").is_file())
    ]
    assert (package / "dialect.py").is_file() and missing == []


# The protocol's own subpackages are dialects' wire models; its modules at the top
# (errors.py, wire.py) are the neutral parts every dialect shares.
PROTOCOL_DIALECTS = sorted(
    p.parent.name for p in (ROOT / "inference/protocol").glob("*/__init__.py")
)


def test_shared_serving_speaks_no_dialect():
    """Serving's shared modules (those directly in inference/serving/) import no dialect's wire
    models: what writes a dialect's wire lives in that dialect's package."""
    wire = re.compile(rf"^inference\.protocol\.({'|'.join(PROTOCOL_DIALECTS)})(\.|$)")
    shared = [m for m, path in import_graph.module_files().items() if path.parent == SERVING]
    wrong = [f"{m} imports {target}" for m in shared for target in GRAPH[m] if wire.match(target)]
    assert {"openai", "anthropic", "ollama"} <= set(PROTOCOL_DIALECTS) and wrong == []


def test_no_name_is_defined_twice_in_serving():
    """A class or function of serving means one thing: two dialects' writers or plan builders
    carry distinct names (ChatCompletionWriter, OllamaChatWriter), and shared code is defined
    once and imported, never copied."""
    where: dict[str, list[str]] = {}
    for path in sorted(SERVING.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                where.setdefault(node.name, []).append(str(path.relative_to(SERVING)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


def test_no_serving_module_imports_another_dialects_package():
    """What two dialects share belongs in serving's core, never in one of them; and the core
    (the pipeline, the plan, Generation...) knows no dialect: a new dialect needs only its own
    package (a protocol package, a plan builder, a reply writer), a view and a URL."""
    wrong = []
    for module, targets in GRAPH.items():
        if not module.startswith("inference.serving"):
            continue
        own = dialect_of(module)
        for target in targets:
            other = dialect_of(target)
            if other is not None and other != own:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def production_files() -> list[Path]:
    files = [p for app in APPS for p in (ROOT / app).rglob("*.py") if "migrations" not in p.parts]
    return files + sorted((ROOT / "bench").glob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))


def test_no_production_function_is_long():
    long = []
    for path in production_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > LONGEST_FUNCTION:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length})")
    assert long == []


def test_no_private_django_hooks_or_ambient_request_state():
    pattern = re.compile(r"_resource_closers|records\.current|ContextVar")
    found = [
        str(path.relative_to(ROOT))
        for path in production_files()
        if pattern.search(path.read_text())
    ]
    assert found == []


def url_patterns(resolver: URLResolver, prefix: str = ""):
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            if entry.app_name != "admin":
                yield from url_patterns(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.callback


# Pages for people (HTML, redirect to the admin login) rather than API endpoints.
PAGES = {"", "playground"}


def test_every_api_url_is_declared_at_the_edge():
    undeclared = [
        route
        for route, view in url_patterns(get_resolver())
        if route not in PAGES and not hasattr(view, "endpoint")
    ]
    assert undeclared == []
