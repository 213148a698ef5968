"""Room sizes and the catalog's place below inference (issue 45), checked on the source: no
production module over 500 lines, no class over 250, and the catalog importing only inference's
plain libraries, each such import named here."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from tests.support.helpers import ROOT

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

APPS = ("apikeys", "batches", "catalog", "config", "dashboard", "inference", "storedresponses")
LONGEST_MODULE = 500
LONGEST_CLASS = 250


def load_import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts/import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


import_graph = load_import_graph()


def production_modules() -> list[Path]:
    """The apps' modules; migrations are generated history, tests, bench and scripts tools."""
    return sorted(
        path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.relative_to(ROOT).parts
    )


def test_the_production_modules_are_found():
    found = {str(path.relative_to(ROOT)) for path in production_modules()}
    assert {"catalog/models/catalog.py", "inference/engine/worker.py"} <= found
    assert not any("/migrations/" in name for name in found)


def test_no_production_module_is_over_500_lines():
    long = [
        f"{path.relative_to(ROOT)} ({lines})"
        for path in production_modules()
        if (lines := len(path.read_text().splitlines())) > LONGEST_MODULE
    ]
    assert long == []


def class_lengths() -> dict[str, int]:
    lengths = {}
    for path in production_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                lengths[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - node.lineno + 1
    return lengths


def test_no_class_is_over_250_lines():
    long = [f"{name} ({n})" for name, n in class_lengths().items() if n > LONGEST_CLASS]
    assert long == []


# Inference's plain libraries: they import no Django and nothing of the catalog (the arrows of
# test_architecture.py), so the catalog may stand on them; never on serving, the runtime, the
# edge, the views or the wire models, which stand on the catalog.
PLAIN_LIBRARIES = ("inference.engine", "inference.adapters", "inference.conversion")

# Every catalog import of those libraries, each a decision: a new one is added here on purpose.
# The engine's values and file checks stay in the engine (its room, which other changes edit);
# moving them to a module both import would let these go.
CATALOG_USES = {
    # The fields' choices: the migrations name these very callables (0001, 0015, 0027), and
    # a family's FamilyProfile is what the adapters read.
    "catalog.models.prompting": {"inference.adapters", "inference.adapters.toolcalls"},
    # The choices of compute format, KV cache, rounding and drafters; ModelSpec, what spec()
    # hands the engine.
    "catalog.models.catalog": {
        "inference.engine.drafting",
        "inference.engine.formats",
        "inference.engine.types",
    },
    # What clean() refuses as the engine would when loading: formats it cannot run, a missing
    # MTP head, a context past Llama 4's chunk.
    "catalog.models.checks": {
        "inference.engine.formats",
        "inference.engine.mtp.files",
        "inference.engine.vocabulary",
    },
    "catalog.model_config": {"inference.engine.vocabulary"},
    # The family a model's own template shows (the admin's "family in use").
    "catalog.families": {"inference.adapters.detect"},
    # Reading GGUF files: their header for the sources page, the conversion for imports.
    "catalog.gguf_header": {"inference.conversion.gguf_file"},
    "catalog.gguf_sources": {"inference.conversion.gguf"},
    "catalog.management.commands.import_gguf": {"inference.conversion.gguf"},
    "catalog.management.commands.add_model": {
        "inference.engine.formats",
        "inference.engine.mtp.files",
    },
}


def inference_imports(path: Path) -> set[str]:
    """Every inference module `path` names in an import, in functions and TYPE_CHECKING too."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    known = import_graph.module_files()
    return {n for n in names if (n == "inference" or n.startswith("inference.")) and n in known}


def catalog_imports() -> dict[str, set[str]]:
    found = {}
    for module, path in import_graph.module_files().items():
        if module.split(".")[0] == "catalog" and ".migrations" not in module:
            imported = inference_imports(path)
            if imported:
                found[module] = imported
    return found


def test_the_catalog_stands_only_on_inferences_plain_libraries():
    """The admin reaches the pool through catalog/pool_seam.py, never serving's control."""
    wrong = [
        f"{module} imports {target}"
        for module, targets in catalog_imports().items()
        for target in sorted(targets)
        if not target.startswith(tuple(f"{lib}." for lib in PLAIN_LIBRARIES) + PLAIN_LIBRARIES)
    ]
    assert wrong == []


def test_each_catalog_import_of_inference_is_named():
    assert catalog_imports() == CATALOG_USES


@pytest.mark.parametrize("module", ["catalog.admin", "catalog.pool_notes", "catalog.pool_seam"])
def test_the_admin_and_its_pool_notes_import_nothing_of_inference(module):
    path = import_graph.module_files()[module]
    assert inference_imports(path) == set()


def test_tests_mirror_the_rooms_with_support_in_one_package():
    """A test is found from its room (tests/<room>/), what tests share from tests/support/:
    nothing but the fixtures sits loose at tests/' top, and no second tree (tests/unit/) holds
    a room's tests beside its own folder."""
    tests = ROOT / "tests"
    allowed = ("__init__.py", "conftest.py")
    loose = sorted(p.name for p in tests.glob("*.py") if p.name not in allowed)
    assert not loose, f"shared test code belongs in tests/support/: {loose}"
    assert not list((tests / "unit").rglob("test_*.py")), "a room's tests go in tests/<room>/"
