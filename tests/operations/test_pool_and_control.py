"""The model pool under the engine, the /control API, admin actions and preloading."""

import shutil
import subprocess
import sys
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from catalog.models import CatalogModel
from inference.engine import pool as pool_module
from inference.engine.config import EngineConfig
from inference.engine.pool import ModelPool
from inference.engine.types import Done, ModelSpec, SamplingParams
from inference.engine.worker import Engine
from inference.runtime import engine_handle
from inference.serving.control import preload_models
from tests.support.helpers import ROOT, collect, quantize_model_dir, run_job, start_job, wait_until

NO_EOS = {2: -100.0}


@pytest.fixture
def fresh_engine():
    engine = Engine(EngineConfig(pool_budget_bytes=8 * 2**30))
    yield engine
    engine.stop()


def copies_of(tiny_dir, tmp_path, names, pinned=()):
    specs = []
    for name in names:
        shutil.copytree(tiny_dir, tmp_path / name)
        specs.append(ModelSpec(model_id=name, location=str(tmp_path / name), pinned=name in pinned))
    return specs


def test_pinned_models_are_never_evicted(tiny_dir, tmp_path):
    a, b, c = copies_of(tiny_dir, tmp_path, "abc", pinned={"a"})
    size = sum(f.stat().st_size for f in tiny_dir.glob("*.safetensors"))
    pool = ModelPool(budget_bytes=int(size * 2.5))
    pool.get(a)
    pool.get(b)
    pool.get(c)  # a is the least recently used, but pinned: b goes
    assert sorted(pool.loaded_ids()) == ["a", "c"]


def test_ten_concurrent_first_requests_load_once(fresh_engine, tiny_dir, monkeypatch):
    loads = []
    real_load = pool_module.load_weights

    def counting_load(*args, **kwargs):
        loads.append(args[0].location)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(pool_module, "load_weights", counting_load)
    spec = ModelSpec(model_id="cold", location=str(tiny_dir))
    params = SamplingParams(temperature=0, max_tokens=3, logit_bias=NO_EOS)
    jobs = [start_job(fresh_engine, spec, params=params) for _ in range(10)]
    results = [run_to_end(job) for job in jobs]
    assert all(isinstance(done, Done) for done in results)
    assert loads == [str(tiny_dir)]


def run_to_end(job):
    from tests.support.helpers import collect

    return collect(job)[1]


MEMORY_PROBE = """
import sys, mlx.core as mx
from inference.engine.pool import ModelPool
from inference.engine.types import ModelSpec
pool = ModelPool(budget_bytes=8 * 2**30)
mx.clear_cache()
before = mx.get_active_memory()
pool.get(ModelSpec(model_id="smol", location=sys.argv[1]))
loaded = mx.get_active_memory()
pool.unload("smol")
print(before, loaded, mx.get_active_memory())
"""


def test_unload_returns_memory(smollm_dir):
    # A process of its own: nothing else allocates while it measures.
    probe = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(smollm_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    before, loaded, after = map(int, probe.stdout.split())
    assert loaded - before > 50 * 2**20  # the weights really were in memory
    assert abs(after - before) <= 0.05 * max(before, loaded - before)


def test_idle_models_unload_after_their_ttl(tiny_dir, tmp_path):
    engine = Engine(EngineConfig(idle_ttl=0.5))
    try:
        (spec,) = copies_of(tiny_dir, tmp_path, ["idle"])
        assert isinstance(run_job(engine, spec)[1], Done)
        assert engine.pool.loaded_ids() == ["idle"]
        deadline = time.monotonic() + 5
        while engine.pool.loaded_ids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.pool.loaded_ids() == []
    finally:
        engine.stop()


def test_status_counts_running_sequences(fresh_engine, tiny_dir):
    spec = ModelSpec(model_id="busy", location=str(tiny_dir))
    job = start_job(
        fresh_engine, spec, params=SamplingParams(temperature=0, max_tokens=300, logit_bias=NO_EOS)
    )
    job.events.get(timeout=60)  # Started
    job.events.get(timeout=60)  # a first token
    (model,) = fresh_engine.state.models
    assert model.id == "busy"
    assert model.active_sequences == 1
    assert fresh_engine.state.running == 1
    job.cancelled.set()
    assert wait_until(lambda: fresh_engine.state.running == 0, 1)


# The control API, in-process.


@pytest.fixture
def tiny_entry(db, tiny_dir):
    return CatalogModel.objects.create(public_id="tiny-ctl", location=str(tiny_dir))


def auth(settings):
    return {"HTTP_AUTHORIZATION": f"Bearer {settings.ADMIN_TOKEN}"}


def test_control_requires_the_token_or_staff(client, db, settings):
    assert client.get("/control/pool").status_code == 401
    wrong = client.get("/control/pool", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_admin_token"
    assert client.get("/control/pool", **auth(settings)).status_code == 200


def test_staff_sessions_need_csrf_for_writes(admin_user, tiny_entry):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(admin_user)
    assert browser.get("/control/pool").status_code == 200
    assert browser.post("/control/models/tiny-ctl/warm").status_code == 403


def test_warm_status_unload(client, tiny_entry, settings):
    warmed = client.post("/control/models/tiny-ctl/warm", **auth(settings)).json()
    assert warmed["id"] == "tiny-ctl" and warmed["bytes"] > 0
    again = client.post("/control/models/tiny-ctl/warm", **auth(settings)).json()
    assert again["already_loaded"] is True
    status = client.get("/control/pool", **auth(settings)).json()
    (model,) = [m for m in status["models"] if m["id"] == "tiny-ctl"]
    # What it computes with: its KV cache as it really is (auto on a CPU with the kernels:
    # float16, else the model's own), and the context it serves.
    assert model["kv_cache"] in ("float16", "native")
    assert model["context_length"] == 512  # the tiny model's max_position_embeddings
    assert model["weights"] == "float32"  # random weights as MLX made them, unquantized
    assert {
        "id": "tiny-ctl",
        "aliases": [],
        "enabled": True,
        "loaded": True,
        "pinned": False,
        "preload": False,
    } in status["catalog"]
    assert client.post("/control/models/tiny-ctl/unload", **auth(settings)).json() == {
        "id": "tiny-ctl",
        "unloaded": True,
    }
    missing = client.post("/control/models/nope/warm", **auth(settings))
    assert missing.status_code == 404


def test_a_stored_quantized_model_says_what_is_stored(client, db, tiny_dir, tmp_path, settings):
    """compute_format "stored" alone did not say what is stored: /control/pool and /health
    say the weights too (the tiny model quantized as mlx-lm writes it, 4-bit at group 32)."""
    folder = quantize_model_dir(tiny_dir, tmp_path / "tiny-4bit")
    # "quantized": the catalog's name for computing in the stored weights.
    CatalogModel.objects.create(
        public_id="tiny-q4", location=str(folder), compute_format="quantized"
    )
    assert client.post("/control/models/tiny-q4/warm", **auth(settings)).json()["bytes"] > 0
    status = client.get("/control/pool", **auth(settings)).json()
    (model,) = [m for m in status["models"] if m["id"] == "tiny-q4"]
    assert (model["compute_format"], model["weights"]) == ("stored", "4-bit g32")
    health = client.get("/health", **auth(settings)).json()["models"]["tiny-q4"]
    assert (health["compute_format"], health["weights"]) == ("stored", "4-bit g32")
    client.post("/control/models/tiny-q4/unload", **auth(settings))


def test_admin_actions_warm_and_unload(admin_client, tiny_entry, settings):
    changelist = "/admin/catalog/catalogmodel/"
    data = {"action": "warm", "_selected_action": [tiny_entry.pk]}
    page = admin_client.post(changelist, data, follow=True)
    assert b"Tiny-ctl: loaded in" in page.content  # the admin capitalises messages
    listed = admin_client.get(changelist).content.decode()
    assert "tokens of context" in listed  # the KV cache column, as the loaded model has it
    status = admin_client.get("/control/pool").json()
    assert "tiny-ctl" in [m["id"] for m in status["models"]]
    page = admin_client.post(changelist, {**data, "action": "unload"}, follow=True)
    assert b"Tiny-ctl: unloaded" in page.content


@pytest.mark.django_db(transaction=True)
def test_preload_loads_marked_models(tiny_dir, settings):
    CatalogModel.objects.create(public_id="pre", location=str(tiny_dir), preload=True)
    CatalogModel.objects.create(public_id="broken", location="/gone", preload=True)
    assert async_to_sync(preload_models)(engine_handle()) == ["broken"]
    client = Client()
    status = client.get("/control/pool", **auth(settings)).json()
    assert "pre" in [m["id"] for m in status["models"]]
    client.post("/control/models/pre/unload", **auth(settings))


def test_threads_may_call_the_engine_while_generating(fresh_engine, tiny_dir):
    spec = ModelSpec(model_id="t", location=str(tiny_dir))
    job = start_job(
        fresh_engine, spec, params=SamplingParams(temperature=0, max_tokens=40, logit_bias=NO_EOS)
    )
    answers = []
    askers = [
        threading.Thread(
            target=lambda: answers.append(fresh_engine.call(lambda e: e.pinned_specs()).result(30))
        )
        for _ in range(5)
    ]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    assert len(answers) == 5
    assert isinstance(run_to_end(job), Done)


def test_prefix_cache_holds_no_more_memory_than_it_counts(fresh_engine, tiny_dir):
    """Cached prefixes once were views into batch-sized KV buffers: memory grew without bound
    while the cache reported a fraction of it."""
    import mlx.core as mx

    spec = ModelSpec(model_id="tiny", location=str(tiny_dir))
    params = SamplingParams(temperature=0, max_tokens=12, logit_bias=NO_EOS)

    def batch_of_eight(round_: int) -> None:
        prompts = [f"Round {round_}, question {i}: " + "why? " * (5 * i) for i in range(8)]
        for job in [start_job(fresh_engine, spec, prompt, params) for prompt in prompts]:
            assert isinstance(collect(job)[1], Done)

    def active_and_cached():
        return fresh_engine.call(
            lambda e: (mx.get_active_memory(), e.state.models[0].prefix_cache_bytes)
        ).result(timeout=30)

    batch_of_eight(0)  # loads the model and warms MLX up
    active_before, cached_before = active_and_cached()
    for round_ in (1, 2, 3):
        batch_of_eight(round_)
    active_after, cached_after = active_and_cached()
    grown, counted = active_after - active_before, cached_after - cached_before
    assert counted > 0
    assert grown <= counted * 1.5, (grown, counted)  # was 3.4x before the fix
