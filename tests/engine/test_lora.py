"""LoRA adapters in the pool (engine/lora.py): an adapter's rows decode in its base's batch,
through the base's model with per-row adapter weights; each answers as mlx-lm's own
`load(base, adapter_path=)` does, alone or mixed with the base's rows and another adapter's,
leaves the base as it was, keeps its own prefix cache, and can be unloaded while its base
serves others."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step

from inference.engine import lora, prefix_disk
from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.cpu import fused
from inference.engine.pool import ModelPool
from inference.engine.types import (
    Delta,
    Done,
    EngineError,
    Failed,
    GenerationJob,
    ModelSpec,
    SamplingParams,
    Started,
    TokenPrompt,
)
from tests.engine.jobs import greedy as greedy_params
from tests.engine.jobs import make_sequence
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


def greedy(
    engine, spec: ModelSpec, ids: list[int], tokens: int = TOKENS
) -> tuple[str, list[float]]:
    """The engine's greedy text and the log-probability of each token it chose."""
    events: queue.SimpleQueue = queue.SimpleQueue()
    params = SamplingParams(temperature=0, max_tokens=tokens, logit_bias={2: -100}, logprobs=True)
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
    assert adapter.base is shared and adapter.model is shared.model
    runners = list(engine._parts.runners)  # the engine is shared: other tests' models too
    assert "lora-base" in runners and "lora-adapted" not in runners  # one runner: the base's
    # Only the LoRA matrices count: the base's arrays are the same objects, not copies.
    assert adapter.nbytes == (adapter_dir / "adapters.safetensors").stat().st_size - _header(
        adapter_dir
    )
    assert shared.lora.names == ["lora-adapted"]
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
    # Together in one batch (the adapted blocks per-op, the others fused) as alone.
    streams = [_Stream(engine, spec, ids, TOKENS) for spec in (base, adapted, base, adapted)]
    assert [(s.last(), s.text)[1] for s in streams] == [before, text] * 2
    loaded = {m.spec.model_id: m for m in engine.pool.loaded()}
    if loaded["q4-base"].kernels:
        model = loaded["q4-base"].model
        assert loaded["q4-adapted"].model is model
        blocks = [type(b).__name__ for b in model.layers]
        assert blocks == ["FusedLlamaBlock"] * 2  # the class stays; its parts decide the path
        q_proj = model.layers[1].self_attn.q_proj
        assert type(q_proj).__name__ == "AdaptedLinear"
        assert type(q_proj.linear).__name__ == "KernelLinear"
        # Base rows alone keep the fused path; an adapter row in the batch leaves it.
        lora = loaded["q4-base"].lora
        assert fused._parts(model.layers[1]) is not None
        with lora.rows([None, "q4-adapted"]):
            assert fused._parts(model.layers[1]) is None
            assert fused._parts(model.layers[0]) is not None  # not adapted: still fused
    unload(engine, "q4-base")


def unload(engine, model_id: str) -> None:
    engine.call(lambda engine: engine.unload(model_id)).result(timeout=60)


# Rows in one batch: the runner driven step by step (no engine thread), over a pool that
# holds the base and two adapters of it.

NO_CACHE = EngineConfig(prompt_cache_bytes=0)
PROMPTS = ("The quick brown fox jumps over", "Once upon a time there", "In the beginning")
MIXED_TOKENS = 8
JOINING = {0: (0, 4, 8), 2: (1, 5, 6), 4: (2, 3, 7)}  # step -> the rows that join then


@pytest.fixture(scope="module")
def mixed(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A pool with the tiny base and two adapters over it (another seed, another layer count)."""
    folder = tmp_path_factory.mktemp("mixed")
    base = ModelSpec(model_id="mix-base", location=str(tiny_dir))
    specs = [
        base,
        ModelSpec(model_id="mix-a", location=str(make_adapter(tiny_dir, folder / "a")), base=base),
        ModelSpec(
            model_id="mix-b",
            location=str(make_adapter(tiny_dir, folder / "b", layers=1, seed=11)),
            base=base,
        ),
    ]
    pool = ModelPool(2**30)
    return pool, [pool.get(spec) for spec in specs]


@pytest.fixture(params=["grouped", "stacked"])
def lora_mode(request: pytest.FixtureRequest):
    """Each way the adapted linears add their rows' terms (lora.MODE)."""
    default, lora.MODE["lora"] = lora.MODE["lora"], request.param
    yield request.param
    lora.MODE["lora"] = default


def test_rows_of_a_base_and_two_adapters_decode_in_one_batch(mixed, lora_mode):
    """Each row's greedy text in a batch mixing the base and two adapters, rows joining at
    different steps, is the text it gets alone; and they decode in one batch, one step."""
    _, models = mixed
    base = models[0]
    # Row k: model k % 3 on prompt k // 3, so every prompt is asked of all three models.
    jobs = [(models[k % 3], base.tokenizer.encode(PROMPTS[k // 3])) for k in range(9)]
    alone = [_texts(ModelRunner(base, NO_CACHE), [(m, ids)])[0] for m, ids in jobs]
    for p in range(3):  # each adapter answers otherwise than the base and the other
        assert len(set(alone[3 * p : 3 * p + 3])) == 3, alone

    runner = ModelRunner(base, NO_CACHE)
    sequences = [make_sequence(m, ids, greedy_params(MIXED_TOKENS)) for m, ids in jobs]
    texts = {id(s): "" for s in sequences}
    joining = {step: [sequences[k] for k in rows] for step, rows in JOINING.items()}
    together = 0
    for step in range(60):
        for sequence in joining.get(step, []):  # rows join at three different steps
            runner.add(sequence)
        for sequence, events in runner.step():
            texts[id(sequence)] += "".join(e.text for e in events if isinstance(e, Delta))
        decoding = {row.loaded.spec.model_id for row in runner._decode.rows}
        together += decoding == {"mix-base", "mix-a", "mix-b"}
        if all(s.finished for s in sequences):
            break
    assert all(s.finished for s in sequences)
    assert [texts[id(s)] for s in sequences] == alone
    assert together > 0  # one decode batch, one step, held rows of all three models
    assert all(m.active == 0 for m in models)


def _texts(runner: ModelRunner, jobs, **params: object) -> list[str]:
    sequences = [make_sequence(m, ids, greedy_params(MIXED_TOKENS, **params)) for m, ids in jobs]
    texts = {id(s): "" for s in sequences}
    for sequence in sequences:
        runner.add(sequence)
    for _ in range(60):
        for sequence, events in runner.step():
            texts[id(sequence)] += "".join(e.text for e in events if isinstance(e, Delta))
        if all(s.finished for s in sequences):
            break
    runner._settle()
    return [texts[id(s)] for s in sequences]


def test_the_prefix_cache_is_kept_apart_by_adapter(mixed):
    """A prompt the base has read is never served to an adapter's row, nor the adapter's to
    the base's: each model finds only its own prefixes, in one memory; the disk key differs."""
    _, (base, adapter, _) = mixed
    runner = ModelRunner(base, EngineConfig())
    ids = base.tokenizer.encode(PROMPTS[0] + " " + PROMPTS[1])
    first = _run_one(runner, base, ids)
    assert first.cached_tokens == 0
    adapted = _run_one(runner, adapter, ids)
    assert adapted.cached_tokens == 0  # the base's KV of the same prompt is not the adapter's
    assert _run_one(runner, base, ids).cached_tokens > 0
    again = _run_one(runner, adapter, ids)
    assert again.cached_tokens > 0 and again.text == adapted.text
    assert runner.prefixes_of("mix-a") is not runner.prefixes_of("mix-base")
    assert runner.prefixes_of("mix-a").nbytes == runner.prefix_cache_bytes  # one memory
    keys = {prefix_disk.model_key(m.spec, m.compute_format, m.kernels) for m in (base, adapter)}
    assert len(keys) == 2
    runner.drop_adapter("mix-a")  # unloaded: its entries leave the memory
    assert _run_one(runner, adapter, ids).cached_tokens == 0


@dataclass
class _One:
    text: str
    cached_tokens: int


def _run_one(runner: ModelRunner, model, ids: list[int]) -> _One:
    sequence = make_sequence(model, ids, greedy_params(MIXED_TOKENS))
    runner.add(sequence)
    text = ""
    for _ in range(60):
        for row, events in runner.step():
            if row is sequence:
                text += "".join(e.text for e in events if isinstance(e, Delta))
        if sequence.finished:
            break
    runner._settle()
    return _One(text, sequence.cached_tokens)


def test_an_adapter_unloads_while_its_base_serves_others(engine, tiny_dir, adapter_dir):
    """An adapter asked for before its base loads the base; unloading the adapter fails its
    own rows, saying why, and leaves the base's rows in the shared batch to finish as they
    would have alone; the base stays loaded, as it was."""
    base = ModelSpec(model_id="ul-base", location=str(tiny_dir))
    adapted = ModelSpec(model_id="ul-adapted", location=str(adapter_dir), base=base)
    ids = prompt_ids(tiny_dir)
    rows = _Stream(engine, adapted, ids, max_tokens=4000)  # its base not loaded: read along
    rows.until_text()
    # The engine is the session's: other tests' models may be loaded beside these.
    assert {"ul-adapted", "ul-base"} <= set(engine.pool.loaded_ids())
    answer = _Stream(engine, base, ids, max_tokens=60)
    answer.until_text()  # both decoding in the base's one batch now
    assert "ul-base" in engine._parts.runners and "ul-adapted" not in engine._parts.runners
    assert _rows_shown(engine, "ul-") == {"ul-base": 1, "ul-adapted": 1}  # /health's snapshot
    unload(engine, "ul-adapted")
    failed = rows.last()
    assert isinstance(failed, Failed) and "was unloaded" in failed.error.message
    assert isinstance(answer.last(), Done)
    loaded = engine.pool.loaded_ids()
    assert "ul-base" in loaded and "ul-adapted" not in loaded
    shared = engine.pool.loaded()[0]
    assert shared.lora.names == [] and shared.active == 0
    assert not any(type(m).__name__ == "AdaptedLinear" for _, m in shared.model.named_modules())
    assert greedy(engine, base, ids, tokens=60)[0] == answer.text  # as it would have alone
    unload(engine, "ul-base")


def _rows_shown(engine, prefix: str) -> dict[str, int]:
    """Each loaded model's decoding rows (of those named `prefix`...) as the published
    snapshot (/health, /control/pool, the dashboard) shows them, once a turn has published
    both rows."""
    for _ in range(200):
        shown = {m.id: m.active_sequences for m in engine.state.models if m.id.startswith(prefix)}
        if sum(shown.values()) == 2:
            return shown
        time.sleep(0.01)
    return shown


def test_adapter_rows_speculate_with_ngrams_and_refuse_mtp_plainly(mixed):
    """An adapter's row verifies n-gram drafts through the adapted linears (its greedy text
    as without drafts, beside a base row); MTP, which its base's head would draft for the
    base's weights, is refused saying why."""
    _, (base, adapter, _) = mixed
    ids = base.tokenizer.encode("one two three one two three one two three one two")
    plain = _texts(ModelRunner(base, NO_CACHE), [(adapter, ids), (base, ids)])
    runner = ModelRunner(base, NO_CACHE)
    drafted = _texts(runner, [(adapter, ids), (base, ids)], speculative="ngram")
    assert drafted == plain and runner.speculation.steps > 0
    with pytest.raises(EngineError, match="LoRA adapter's rows draft with n-gram lookup only"):
        make_sequence(adapter, ids, greedy_params(4, speculative="mtp"))


class _Stream:
    """One greedy job's events as they come."""

    def __init__(self, engine, spec: ModelSpec, ids: list[int], max_tokens: int) -> None:
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        params = SamplingParams(temperature=0, max_tokens=max_tokens, logit_bias={2: -100})
        engine.submit(GenerationJob(spec, TokenPrompt(tuple(ids)), params, self.events.put))
        self.text = ""

    def _next(self):
        event = self.events.get(timeout=120)
        if isinstance(event, Delta):
            self.text += event.text
        return event

    def until_text(self) -> None:
        while not self.text:
            assert not isinstance(self._next(), Done | Failed)

    def last(self):
        while not isinstance(event := self._next(), Done | Failed):
            pass
        return event
