"""What several test modules share: paths, request bodies and assertions for /v1, building
small models, and running engine jobs synchronously. Fixtures live in conftest.py."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import time
from pathlib import Path

from asgiref.sync import async_to_sync
from django.test import AsyncClient

from inference.adapters import FamilyAdapter, FamilyProfile, get_adapter
from inference.engine.types import (
    Delta,
    Done,
    Event,
    Failed,
    GenerationJob,
    ModelSpec,
    SamplingParams,
    Started,
)
from inference.serving.prompts import ChatPrompt, PromptJob

ROOT = Path(__file__).resolve().parents[2]
DEMO_ID = "smollm2-135m-instruct"
CHAT = "/v1/chat/completions"
NO_EOS = {"2": -100}  # logit_bias that bans the tiny model's end token

TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 512,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def build_tiny_model(
    tokenizer_source: Path, destination: Path, seed: int = 0, **overrides: object
) -> Path:
    """A random-weight Llama with SmolLM2's real tokenizer: fast, and tokenizes for real.
    `overrides` change its config (another mlx-lm `model_type` of the same shape, say)."""
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    destination.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_source / name, destination / name)
    vocab_size = len(
        json.loads((tokenizer_source / "tokenizer.json").read_text())["model"]["vocab"]
    )
    config = {**TINY_CONFIG, "vocab_size": vocab_size, **overrides}
    (destination / "config.json").write_text(json.dumps(config))
    mx.random.seed(seed)
    architecture = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    model = architecture.Model(architecture.ModelArgs.from_dict(config))
    mx.save_safetensors(
        str(destination / "model.safetensors"), dict(tree_flatten(model.parameters()))
    )
    return destination


SMALL_LLAMA = (256, 512, 2, 1024)  # hidden, ffn, layers, vocabulary: rows of 256


def copy_gguf_tokenizer(writer, source: Path) -> None:
    from gguf import GGUFReader

    reader = GGUFReader(source)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            sub_type = field.types[-1] if len(field.types) > 1 else None
            writer.add_key_value(key, field.contents(), field.types[0], sub_type)


def write_small_llama(
    path: Path, tokenizer_from: Path, seed: int = 0, shape: tuple = SMALL_LLAMA
) -> Path:
    """A random float32 Llama in GGUF with the rows K-quants need: shape (hidden, ffn,
    layers, vocabulary), each a multiple of 256."""
    import numpy as np
    from gguf import GGUFWriter

    HIDDEN, FFN, LAYERS, VOCAB = shape

    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), "llama")
    writer.add_name("small llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(512)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HIDDEN // 4)
    copy_gguf_tokenizer(writer, tokenizer_from)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(VOCAB, HIDDEN))
    for i in range(LAYERS):
        for name, shape in [
            ("attn_q", (HIDDEN, HIDDEN)),
            ("attn_k", (HIDDEN // 2, HIDDEN)),
            ("attn_v", (HIDDEN // 2, HIDDEN)),
            ("attn_output", (HIDDEN, HIDDEN)),
            ("ffn_gate", (FFN, HIDDEN)),
            ("ffn_up", (FFN, HIDDEN)),
            ("ffn_down", (HIDDEN, FFN)),
        ]:
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(*shape))
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{i}.{norm}.weight", 1 + weight(HIDDEN))
    writer.add_tensor("output_norm.weight", 1 + weight(HIDDEN))
    writer.add_tensor("output.weight", weight(VOCAB, HIDDEN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def quantize_gguf(tools: Path, source: Path, destination: Path, kind: str, *flags: str) -> Path:
    """llama.cpp's llama-quantize (the `llama_tools` fixture's) of a GGUF to `kind` (Q4_K_M...)."""
    command = [str(tools / "llama-quantize"), *flags, str(source), str(destination), kind, "2"]
    subprocess.run(command, check=True, capture_output=True)
    return destination


def quantize_model_dir(source: Path, destination: Path, bits: int = 4) -> Path:
    """A 4-bit copy of a float model directory, as mlx-lm would write it."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_lm import load

    model, _ = load(str(source))
    nn.quantize(model, group_size=32, bits=bits)
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("*.safetensors"))
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(destination / "model.safetensors"), weights)
    config = json.loads((destination / "config.json").read_text())
    config["quantization"] = {"group_size": 32, "bits": bits}
    (destination / "config.json").write_text(json.dumps(config))
    return destination


def make_adapter(base: Path, folder: Path, layers: int = 2, seed: int = 7) -> Path:
    """A LoRA adapter as mlx-lm's trainer saves one, its B random (nonzero) so it shows."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import load
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model, _ = load(str(base))
    model.freeze()
    parameters = {"rank": 4, "scale": 4.0, "dropout": 0.0}
    linear_to_lora_layers(model, layers, parameters)
    mx.random.seed(seed)
    weights = {
        name: (mx.random.normal(value.shape) * 0.3 if name.endswith("lora_b") else value)
        for name, value in tree_flatten(model.trainable_parameters())
    }
    folder.mkdir(parents=True)
    mx.save_safetensors(str(folder / "adapters.safetensors"), weights)
    config = {"fine_tune_type": "lora", "num_layers": layers, "lora_parameters": parameters}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def run_job(
    engine,
    spec: ModelSpec,
    messages: list[dict] | str = "Hello",
    params: SamplingParams | None = None,
    adapter: FamilyAdapter | None = None,
    timeout: float = 120,
) -> tuple[str, Event]:
    """Runs one job to the end; returns the text and the final event (Done or Failed)."""
    job = start_job(engine, spec, messages, params, adapter)
    return collect(job, timeout)


def prepared_job(spec, adapter, prompt, params, sink, echo: bool = False) -> GenerationJob:
    """A job as the engine gets it from serving: its prompt rendered and tokenized, its
    family's stops and its grammar compiled (serving/prepare.py)."""
    from inference.serving.prepare import prepare_now

    r = prepare_now(PromptJob(spec, adapter, prompt, params, echo))
    return GenerationJob(
        r.spec, r.prompt, r.params, sink, r.echo, r.stop_ids, r.stop_strings, r.matcher
    )


def start_job(engine, spec, messages="Hello", params=None, adapter=None) -> GenerationJob:
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    events: queue.SimpleQueue = queue.SimpleQueue()
    job = prepared_job(
        spec,
        adapter or get_adapter(FamilyProfile(adapter="chatml")),
        ChatPrompt(messages),
        params or SamplingParams(temperature=0, max_tokens=8),
        events.put,
    )
    job.events = events  # type: ignore[attr-defined]
    engine.submit(job)
    return job


def collect(job: GenerationJob, timeout: float = 120) -> tuple[str, Event]:
    parts = []
    while True:
        event = job.events.get(timeout=timeout)  # type: ignore[attr-defined]
        if isinstance(event, Started):
            continue
        if isinstance(event, Delta):
            parts.append(event.text)
        elif isinstance(event, Done | Failed):
            return "".join(parts), event


# A chat with the tiny model that always runs to max_tokens (its end token is banned).
SHORT_CHAT = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Hi"}],
    "max_tokens": 3,
    "temperature": 0,
    "logit_bias": {"2": -100},
}


def assert_error(response, status, param=None, code=None) -> dict:
    """An OpenAI error object with this status, param and code; returns its `error`."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param
    assert error["code"] == code
    return error


def stream(body: dict) -> tuple[int, str, list[str]]:
    """POSTs a streaming chat in-process; returns status, content type and the SSE payloads."""

    async def go():
        response = await AsyncClient().post(CHAT, body, content_type="application/json")
        lines = [chunk async for chunk in response.streaming_content]
        return response.status_code, response["Content-Type"], b"".join(lines).decode()

    status, content_type, text = async_to_sync(go)()
    events = [block.removeprefix("data: ") for block in text.split("\n\n") if block]
    return status, content_type, events


def wait_until(condition, timeout: float = 2.0) -> bool:
    """Polls `condition` until it holds or `timeout` seconds pass; returns it."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def break_engine_after(monkeypatch, tokens: int) -> None:
    """Every sequence fails on the engine thread once it has `tokens` tokens: a device lost
    mid-stream."""
    from inference.engine.sequence import Sequence

    real_on_token = Sequence.on_token

    def broken(self, *args):
        if self.completion_tokens >= tokens:
            raise RuntimeError("device lost")
        return real_on_token(self, *args)

    monkeypatch.setattr(Sequence, "on_token", broken)


def fresh_env(var_dir: Path) -> dict:
    """This environment as a fresh install sees it: no DATABASE_URL (the default SQLite file in
    VAR_DIR) and no secrets from the environment (the install makes its own files)."""
    left_out = {"DATABASE_URL", "SECRET_KEY", "ADMIN_TOKEN"}
    env = {name: value for name, value in os.environ.items() if name not in left_out}
    return {**env, "VAR_DIR": str(var_dir)}


def mode(path: Path) -> int:
    """A file's permission bits."""
    return path.stat().st_mode & 0o777
