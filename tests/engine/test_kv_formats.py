"""KV cache formats (engine/kv.py): float16 K/V give the float32 cache's greedy tokens through
the runner (sequences joining and leaving, prefix-cache hits); the batched quantized cache holds
exactly what mlx-lm's one-sequence QuantizedKVCache holds, through every batch operation; the
runner generates with 8- and 4-bit K/V, and the prefix cache reuses every format."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
)

from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.kv import (
    NATIVE,
    Float16BatchKVCache,
    Float16BatchRotatingKVCache,
    Float16KVCache,
    Float16RotatingKVCache,
    KVFormat,
    KVRefused,
    batch_of_one,
)
from inference.engine.kv_quantized import BatchQuantizedKVCache, QuantizedKV
from inference.engine.kv_window import QuantizedWindowKV
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.types import ModelSpec
from tests.engine.jobs import greedy, make_sequence
from tests.engine.test_runner import LONG, SHORT, drain, ids_of, run
from tests.support.helpers import build_tiny_model

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

OTHER = "The quick brown fox jumps over the lazy dog, again and again, and then it rests."


@pytest.fixture(scope="module")
def models(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, LoadedModel]:
    """Tiny random models with an output head of their own: heads 16 wide (too narrow for
    group-64 quantization), and 64 wide."""
    root = tmp_path_factory.mktemp("kv")
    pool = ModelPool(2**30)
    narrow = build_tiny_model(smollm_dir, root / "narrow", tie_word_embeddings=False)
    wide = build_tiny_model(smollm_dir, root / "wide", tie_word_embeddings=False, head_dim=64)
    return {
        "narrow": pool.get(ModelSpec(model_id="narrow", location=str(narrow))),
        "wide": pool.get(ModelSpec(model_id="wide", location=str(wide))),
    }


def with_kv(loaded: LoadedModel, kind: str) -> LoadedModel:
    return replace(loaded, spec=replace(loaded.spec, kv_cache=kind), active=0)


def conversation(loaded: LoadedModel) -> tuple[list[list[int]], list[int], ModelRunner]:
    """Sequences joining a decoding batch and leaving it at different times, then a repeated
    prompt and a follow-up turn served from the prefix cache: every sequence's tokens, the
    cached tokens of the last two, and the runner."""
    runner = ModelRunner(loaded, EngineConfig())
    first = make_sequence(loaded, ids_of(loaded, LONG), greedy(14))
    runner.add(first)
    while first.completion_tokens < 4:
        runner.step()
    joining = [
        make_sequence(loaded, ids_of(loaded, SHORT), greedy(5)),
        make_sequence(loaded, ids_of(loaded, OTHER), greedy(9)),
    ]
    for sequence in joining:
        runner.add(sequence)
    drain(runner, first, *joining)
    again = make_sequence(loaded, ids_of(loaded, SHORT), greedy(5))
    follow_up = ids_of(loaded, LONG) + first.fed[1:] + ids_of(loaded, " And then?")
    later = make_sequence(loaded, follow_up, greedy(6))
    run(runner, again, later)
    sequences = [first, *joining, again, later]
    return [s.fed[1:] for s in sequences], [again.cached_tokens, later.cached_tokens], runner


def test_auto_is_float16_for_a_model_computing_in_float32(models):
    loaded = models["narrow"]
    assert loaded.compute_format == "float32"
    assert ModelRunner(loaded, EngineConfig()).kv.kind == "float16"
    assert ModelRunner(with_kv(loaded, NATIVE), EngineConfig()).kv.kind == NATIVE
    # Without the kernels MLX's attention would widen float16 K/V back on every call.
    assert ModelRunner(replace(loaded, kernels=False), EngineConfig()).kv.kind == NATIVE


def test_float16_kv_gives_float32_kv_s_greedy_tokens(models):
    loaded = models["narrow"]
    reference, reference_cached, _ = conversation(with_kv(loaded, NATIVE))
    tokens, cached, runner = conversation(with_kv(loaded, "float16"))
    assert tokens == reference
    assert cached == reference_cached and min(cached) > 0
    # What the prefix cache keeps, and what a batch is made of, stayed float16.
    entries = [e.prompt_cache for e in iter_entries(runner)]
    assert entries and all(type(layer) is Float16KVCache for e in entries for layer in e)
    assert all(layer.keys.dtype == mx.float16 for e in entries for layer in e)
    merged = Float16KVCache.merge(entries[0])
    assert type(merged) is Float16BatchKVCache


def iter_entries(runner: ModelRunner):
    """The prefix cache's entries (through mlx-lm's LRU order and trie)."""
    memory = runner._prefixes._memory
    for lru in memory._lru._lrus.values():
        for model, tokens in lru:
            yield memory._trie.get(model, tokens)


def test_a_format_without_room_for_its_groups_is_refused_saying_why(models):
    # Heads 16 wide: no group mx.quantize takes divides them. Never a silent float16.
    with pytest.raises(KVRefused, match=r"8bit cannot apply: its K/V widths \[16\]"):
        ModelRunner(with_kv(models["narrow"], "8bit"), EngineConfig())


def test_the_widths_come_from_the_caches_and_are_described(models):
    made = KVFormat(models["wide"].model, "8bit")
    assert made.layout.kv_widths() == [("KVCache", 64, 64)] * 2
    assert (made.group, made.dequantize) == (64, False)
    assert made.describe() == "8bit (group 64)"
    assert KVFormat(models["wide"].model, "float16").describe() == "float16"


@pytest.mark.parametrize("kind", ["8bit", "4bit"])
def test_the_runner_generates_with_quantized_kv(models, kind):
    loaded = with_kv(models["wide"], kind)
    runner = ModelRunner(loaded, EngineConfig(prompt_cache_bytes=0))
    assert runner.kv.kind == kind
    sequences = [
        make_sequence(loaded, ids_of(loaded, text), greedy(n))
        for text, n in ((LONG, 8), (SHORT, 5), (OTHER, 6))
    ]
    runner.add(sequences[0])
    while sequences[0].completion_tokens < 3:
        runner.step()
    assert type(runner._decode.cache[0]) is BatchQuantizedKVCache
    assert runner._decode.cache[0].bits == int(kind[0])
    outcomes = run(runner, *sequences[1:])
    drain(runner, sequences[0])
    assert [s.completion_tokens for s in sequences] == [8, 5, 6]
    assert all(o.text for o in outcomes)
    # Against float16 K/V the first tokens agree (the quantization error is small).
    plain = with_kv(models["wide"], "float16")
    (alone,) = run(
        ModelRunner(plain, EngineConfig()), make_sequence(plain, ids_of(plain, SHORT), greedy(5))
    )
    assert sequences[1].fed[1:3] == alone.tokens[:2]


@pytest.mark.parametrize("kind", [NATIVE, "float16", "8bit", "4bit"])
def test_the_prefix_cache_reuses_every_format(models, kind):
    loaded = with_kv(models["wide"], kind)
    runner = ModelRunner(loaded, EngineConfig())
    ids = ids_of(loaded, LONG)
    (first,) = run(runner, make_sequence(loaded, ids, greedy(6)))
    (again,) = run(runner, make_sequence(loaded, ids, greedy(6)))
    assert again.done.cached_tokens == len(ids) - 1
    assert again.tokens == first.tokens
    # A prompt that leaves the cached conversation early reads from a cut-back copy of it...
    before = stored_arrays(runner)
    branch = ids[:40] + ids_of(loaded, " but no")
    (cut,) = run(runner, make_sequence(loaded, branch, greedy(4)))
    assert cut.done.cached_tokens == 40
    after = stored_arrays(runner)
    assert all(mx.array_equal(a, after[k]).item() for k, a in before.items())
    assert (
        cut.tokens
        == run(
            ModelRunner(loaded, EngineConfig(prompt_cache_bytes=0)),
            make_sequence(loaded, branch, greedy(4)),
        )[0].tokens
    )
    # ...and writing into that copy left the stored conversation as it was (the copy's
    # writes once went into the stored arrays: too few positions to change greedy tokens).
    (third,) = run(runner, make_sequence(loaded, ids, greedy(6)))
    assert third.done.cached_tokens == len(ids) - 1
    assert third.tokens == first.tokens


def test_every_kv_layer_is_packed_and_state_is_left_as_it_is(models):
    made = KVFormat(models["wide"].model, "4bit")
    assert made.kind == "4bit" and type(made.make()[0]) is QuantizedKV
    # A CacheList's K/V and window are quantized as any others (kv_window.py).
    pair = made.convert(CacheList(KVCache(), RotatingKVCache(max_size=8)))
    assert [type(c) for c in pair.caches] == [QuantizedKV, QuantizedWindowKV]
    assert (pair.caches[1].max_size, pair.caches[1].bits) == (8, 4)
    # Where the model's code works on its K/V itself, windows stay float16 (and it says so).
    made.dequantize = True
    assert type(made.convert(RotatingKVCache(max_size=8))) is Float16RotatingKVCache
    state = ArraysCache(2)
    assert made.convert(state) is state and type(state) is ArraysCache


def test_a_sliding_window_keeps_float16_through_the_batch():
    windows = []
    for seed, n in ((1, 5), (2, 11)):  # the second past its window of 8
        window = Float16RotatingKVCache(max_size=8)
        window.update_and_fetch(*stored(n, seed))
        windows.append(window)
    batch = Float16RotatingKVCache.merge(windows)
    assert type(batch) is Float16BatchRotatingKVCache and batch.keys.dtype == mx.float16
    keys = mx.random.normal((2, 2, 1, 64))
    batch.update_and_fetch(keys, keys)
    batch.extend(Float16RotatingKVCache.merge([windows[0]]))
    row = batch.extract(1)
    assert type(row) is Float16RotatingKVCache and row.keys.dtype == mx.float16
    assert row.offset == 12


def stored_arrays(runner: ModelRunner) -> dict[tuple, mx.array]:
    """A copy of every array the prefix cache's entries hold, by entry, layer and name (after
    the finished conversations went in, as the next step or request would put them)."""
    runner._settle()
    arrays = {}
    for entry in iter_entries(runner):
        for i, layer in enumerate(entry.prompt_cache):
            for name in ("keys", "values"):
                held = getattr(layer, name)
                for j, array in enumerate(held if isinstance(held, tuple) else (held,)):
                    arrays[(id(entry), i, name, j)] = mx.array(array) + 0
    mx.eval(arrays)
    return arrays


def stored(n: int, seed: int) -> tuple[mx.array, mx.array]:
    mx.random.seed(seed)
    return mx.random.normal((1, 2, n, 64)), mx.random.normal((1, 2, n, 64))


def reference(parts: list[tuple[mx.array, mx.array]], bits: int) -> QuantizedKVCache:
    """mlx-lm's one-sequence cache fed the same K/V (in float16, as ours narrows them)."""
    cache = QuantizedKVCache(group_size=64, bits=bits)
    for keys, values in parts:
        cache.update_and_fetch(keys.astype(mx.float16), values.astype(mx.float16))
    return cache


def same(cache: QuantizedKV, expected: QuantizedKVCache) -> bool:
    ours, theirs = cache.keys_and_values(), expected.keys_and_values()
    return cache.offset == expected.offset and all(
        a.dtype == b.dtype and mx.array_equal(a, b).item()
        for mine, want in zip(ours, theirs, strict=True)
        for a, b in zip(mine, want, strict=True)
    )


@pytest.mark.parametrize("bits", [8, 4])
def test_the_batched_quantized_cache_holds_what_one_sequence_s_holds(bits):
    prompts = [stored(n, seed) for seed, n in enumerate((7, 12, 3))]
    singles = []
    for keys, values in prompts:
        single = QuantizedKV(64, bits)
        single.update_and_fetch(keys, values)
        singles.append(single)
    batch = QuantizedKV.merge(singles)
    history = [[p] for p in prompts]
    # A right-padded prefill chunk: rows of 4, 2 and 1 new positions.
    chunk = [stored(4, 10 + i) for i in range(3)]
    lengths = [4, 2, 1]
    batch.prepare(lengths=lengths, right_padding=[4 - n for n in lengths])
    batch.update_and_fetch(
        mx.concatenate([k for k, _ in chunk]), mx.concatenate([v for _, v in chunk])
    )
    batch.finalize()
    for i, n in enumerate(lengths):
        history[i].append((chunk[i][0][..., :n, :], chunk[i][1][..., :n, :]))
    step(batch, history, seed=20)
    for i in range(3):
        assert same(batch.extract(i), reference(history[i], bits))
    # Rows leave, a newcomer joins, everyone decodes on.
    batch.filter([0, 2])
    history = [history[0], history[2]]
    newcomer = stored(30, 30)
    joining = QuantizedKV(64, bits)
    joining.update_and_fetch(*newcomer)
    batch.extend(QuantizedKV.merge([joining]))
    history.append([newcomer])
    step(batch, history, seed=40)
    step(batch, history, seed=41)
    for i in range(3):
        assert same(batch.extract(i), reference(history[i], bits))
    assert batch.size() == 32 and batch.nbytes > 0
    # A cut-back row is its prefix.
    batch.trim(2)
    cut = batch.extract(2)
    expected = reference([newcomer], bits)
    assert same(cut, expected)


def step(batch: BatchQuantizedKVCache, history: list, seed: int) -> None:
    """One decode step: a new position for every row."""
    rows = len(history)
    mx.random.seed(seed)
    keys, values = mx.random.normal((rows, 2, 1, 64)), mx.random.normal((rows, 2, 1, 64))
    batch.update_and_fetch(keys, values)
    for i in range(rows):
        history[i].append((keys[i : i + 1], values[i : i + 1]))


@pytest.mark.parametrize("layer_type", [KVCache, Float16KVCache])
def test_a_lone_sequence_joins_decoding_without_a_copy_of_its_cache(layer_type):
    layer = layer_type()
    keys, values = stored(300, seed=3)
    layer.update_and_fetch(keys, values)  # a 512-slot buffer holding 300 positions
    batch = batch_of_one(layer)
    assert batch.keys is layer.keys and batch.values is layer.values
    assert type(batch) is type(layer_type.merge([layer_type()]))
    # It reads and grows as a merged batch would.
    merged = layer_type.merge([layer])
    new_keys, new_values = stored(1, seed=4)
    ours, theirs = (
        batch.update_and_fetch(new_keys, new_values),
        merged.update_and_fetch(new_keys, new_values),
    )
    assert all(mx.array_equal(a, b).item() for a, b in zip(ours, theirs, strict=True))
    assert batch.offset.tolist() == merged.offset.tolist() == [301]
    assert mx.array_equal(batch.make_mask(1), merged.make_mask(1)).item()
