"""LoRA adapters in the pool (engine/lora.py): an adapter model shares its base's weights,
answers as mlx-lm's own `load(base, adapter_path=)` does, and leaves the base as it was."""

from __future__ import annotations

import queue
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step

from inference.engine.types import (
    Delta,
    Done,
    GenerationJob,
    ModelSpec,
    SamplingParams,
    Started,
    TokenPrompt,
)
from tests.support.helpers import make_adapter, quantize_model_dir

pytestmark = pytest.mark.database_independent
PROMPT = "The quick brown fox jumps over"
TOKENS = 10


@pytest.fixture(scope="module")
def adapter_dir(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_dir, tmp_path_factory.mktemp("lora") / "adapter")


def prompt_ids(base: Path) -> list[int]:
    _, tokenizer = load(str(base))
    return tokenizer.encode(PROMPT)


def greedy(engine, spec: ModelSpec, ids: list[int]) -> tuple[str, list[float]]:
    """The engine's greedy text and the log-probability of each token it chose."""
    events: queue.SimpleQueue = queue.SimpleQueue()
    params = SamplingParams(temperature=0, max_tokens=TOKENS, logit_bias={2: -100}, logprobs=True)
    engine.submit(GenerationJob(spec, TokenPrompt(tuple(ids)), params, events.put))
    text, logprobs = [], []
    while not isinstance(event := events.get(timeout=120), Done):
        assert not hasattr(event, "error"), event
        if isinstance(event, Delta):
            text.append(event.text)
            logprobs += [token.logprob for token in event.logprobs]
        else:
            assert isinstance(event, Started)
    return "".join(text), logprobs


def mlx_lm_greedy(base: Path, adapter: Path | None, ids: list[int]) -> str:
    model, tokenizer = load(str(base), adapter_path=str(adapter) if adapter else None)

    def no_end(tokens: mx.array, logits: mx.array) -> mx.array:
        return logits + mx.where(mx.arange(logits.shape[-1]) == 2, -100.0, 0.0)

    steps = generate_step(mx.array(ids), model, max_tokens=TOKENS, logits_processors=[no_end])
    return tokenizer.decode([int(token) for token, _ in steps])


def test_an_adapter_answers_as_mlx_lm_and_leaves_its_base_alone(engine, tiny_dir, adapter_dir):
    base = ModelSpec(model_id="lora-base", location=str(tiny_dir))
    adapted = ModelSpec(model_id="lora-adapted", location=str(adapter_dir), base=base)
    ids = prompt_ids(tiny_dir)
    before, base_logprobs = greedy(engine, base, ids)
    text, logprobs = greedy(engine, adapted, ids)
    assert text == mlx_lm_greedy(tiny_dir, adapter_dir, ids)
    assert text != before and logprobs != base_logprobs
    after, after_logprobs = greedy(engine, base, ids)  # both loaded now
    assert (after, after_logprobs) == (before, base_logprobs)
    assert before == mlx_lm_greedy(tiny_dir, None, ids)
    loaded = {m.spec.model_id: m for m in engine.pool.loaded()}
    adapter, shared = loaded["lora-adapted"], loaded["lora-base"]
    assert adapter.base is shared
    # Only the LoRA matrices count: the base's arrays are the same objects, not copies.
    assert adapter.nbytes == (adapter_dir / "adapters.safetensors").stat().st_size - _header(
        adapter_dir
    )
    embed = adapter.model["model"]["embed_tokens"]
    assert embed is shared.model["model"]["embed_tokens"]
    unload(engine, "lora-base")  # its adapter goes with it
    assert {"lora-base", "lora-adapted"}.isdisjoint(engine.pool.loaded_ids())


def _header(folder: Path) -> int:
    """The safetensors header's bytes (8 + its length): what the file has besides the arrays."""
    raw = (folder / "adapters.safetensors").read_bytes()
    return 8 + int.from_bytes(raw[:8], "little")


def test_an_adapter_over_a_quantized_base_on_the_kernels(engine, tiny_dir, tmp_path):
    """A 4-bit base goes through the CPU kernels (fused llama blocks); the adapted blocks take
    mlx-lm's own path around the kernels' linears, the others stay fused."""
    quantized = quantize_model_dir(tiny_dir, tmp_path / "q4")
    folder = make_adapter(quantized, tmp_path / "q4-adapter", layers=1)
    # "quantized": auto would time both formats, and on a model this small float32 may win
    base = ModelSpec(model_id="q4-base", location=str(quantized), compute_format="quantized")
    adapted = ModelSpec(model_id="q4-adapted", location=str(folder), base=base)
    ids = prompt_ids(quantized)
    before, _ = greedy(engine, base, ids)
    text, _ = greedy(engine, adapted, ids)
    assert text != before
    assert greedy(engine, base, ids)[0] == before
    loaded = {m.spec.model_id: m for m in engine.pool.loaded()}
    if loaded["q4-base"].kernels:
        blocks = [type(b).__name__ for b in loaded["q4-adapted"].model.layers]
        assert blocks == ["FusedLlamaBlock"] * 2  # the class stays; its parts decide the path
        q_proj = loaded["q4-adapted"].model.layers[1].self_attn.q_proj
        assert type(q_proj).__name__ == "LoRALinear"
        assert type(q_proj.linear).__name__ == "KernelLinear"
        assert q_proj.linear is loaded["q4-base"].model.layers[1].self_attn.q_proj
    unload(engine, "q4-base")


def unload(engine, model_id: str) -> None:
    engine.call(lambda engine: engine.unload(model_id)).result(timeout=60)
