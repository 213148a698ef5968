"""The prefix cache's disk tier: entries written whole (temporary file, rename, owner-only),
read back bit for bit, refused when damaged, kept under the folder's cap by last use, keyed by
what computed them, written off the engine thread with a bounded queue; and a runner after a
restart (or after the pool evicted its model) reusing a prompt's prefix from disk with the
same greedy tokens as a cold read."""

from __future__ import annotations

import os
import resource
import signal
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import CacheList, KVCache, RotatingKVCache

from inference.engine import kv_file, prefix_disk
from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.kv_window import QuantizedWindowKV
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.prefix_disk import QUEUE_SIZE, PrefixDisk, model_key
from inference.engine.sequence import Sequence
from inference.engine.types import Done, ModelSpec
from tests.engine.jobs import greedy, make_sequence
from tests.support.helpers import build_tiny_model

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

KEY = "0" * 32
LONG = " ".join(f"item {i}," for i in range(60))  # ~180 tokens


def kv_layer(tokens: int, dtype: mx.Dtype = mx.float32, seed: int = 0) -> KVCache:
    """A KVCache holding `tokens` positions of random keys and values (grown in mlx-lm's
    steps of 256, so its arrays are longer than what it holds)."""
    mx.random.seed(seed)
    layer = KVCache()
    shape = (1, 2, tokens, 32)
    layer.update_and_fetch(mx.random.normal(shape).astype(dtype), mx.random.normal(shape))
    mx.eval(layer.keys, layer.values)
    return layer


def kv_cache(tokens: int, seed: int = 0) -> list:
    """One layer of each kind the tier must carry: float32, bfloat16, 8-bit quantized
    ((packed, scales, biases) tuples), nested (CacheList), a rotating window, and a 4-bit one
    (three rotating caches in step, kv_window.py)."""
    window = RotatingKVCache(max_size=64, keep=4)
    window.update_and_fetch(mx.ones((1, 2, 10, 32)), mx.ones((1, 2, 10, 32)))
    packed_window = QuantizedWindowKV(16, 32, 4)
    packed_window.update_and_fetch(*(mx.random.normal((1, 2, 20, 32)) for _ in "kv"))
    return [
        kv_layer(tokens, seed=seed),
        kv_layer(tokens, mx.bfloat16, seed=seed + 1),
        kv_layer(tokens, seed=seed + 2).to_quantized(group_size=32, bits=8),
        CacheList(kv_layer(tokens, seed=seed + 3), kv_layer(tokens, seed=seed + 4)),
        window,
        packed_window,
    ]


def same_arrays(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_arrays(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, mx.array):
        return a.dtype == b.dtype and a.shape == b.shape and mx.array_equal(a, b).item()
    return a == b


def held(layer) -> object:
    """What a layer holds: its keys and values cut to its offset (its state otherwise)."""
    if isinstance(layer, CacheList):
        return [held(c) for c in layer.caches]
    if isinstance(layer, RotatingKVCache):
        return layer.state
    if isinstance(layer, QuantizedWindowKV):
        return [held(c) for c in layer.caches] + [layer.meta_state]
    end = layer.offset
    return [[x[..., :end, :] for x in (part if isinstance(part, (tuple, list)) else (part,))]
            for part in (layer.keys, layer.values)] + [end]  # fmt: skip


def stored(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.kv"))


def write_now(store: PrefixDisk, tokens: list[int], cache: list, key: str = KEY) -> Path:
    assert store.offer(key, tokens, cache)
    assert store.flush(timeout=60)
    name = prefix_disk.entry_name(key, len(tokens), kv_file.token_digest(tokens))
    assert (store.folder / name).is_file()
    return store.folder / name


def test_an_entry_comes_back_as_it_was_stored(tmp_path):
    store = PrefixDisk(tmp_path / "cache", 2**30, min_tokens=8)
    tokens, cache = list(range(100, 400)), kv_cache(300)
    path = write_now(store, tokens, cache)
    # Found through the index for any prompt it starts, never past the limit asked.
    prompt = [*tokens, 7, 8, 9]
    found = store.longest(KEY, prompt, len(prompt) - 1)
    assert found is not None and found.length == 300 and found.name == path.name
    assert store.longest(KEY, prompt, 299) is None
    assert store.longest(KEY, [5, *tokens], 400) is None  # another prefix
    assert store.longest("1" * 32, prompt, 400) is None  # another model
    layers = store.read(found, prompt)
    assert [type(x) for x in layers] == [type(x) for x in cache]
    for before, after in zip(cache, layers, strict=True):
        assert same_arrays(held(before), held(after))
    # The file keeps the KV held, not the 256-step allocation behind it.
    assert layers[0].keys.shape[2] == 300 and cache[0].keys.shape[2] == 512
    assert store.state().hits == 1 and store.state().entries == 1


def test_a_damaged_entry_is_deleted_and_counted_as_a_miss(tmp_path):
    store = PrefixDisk(tmp_path, 2**30, min_tokens=8)
    tokens = list(range(64))
    path = write_now(store, tokens, kv_cache(64))
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01  # one bit of the payload
    path.write_bytes(bytes(data))
    found = store.longest(KEY, [*tokens, 1], 64)
    assert found is not None
    assert store.read(found, [*tokens, 1]) is None
    assert not path.exists() and store.longest(KEY, [*tokens, 1], 64) is None
    state = store.state()
    assert (state.misses, state.failed_reads, state.hits, state.entries) == (1, 1, 0, 0)


@pytest.mark.parametrize("keep", [0, 10, 200, -1])
def test_a_truncated_entry_is_deleted_and_counted_as_a_miss(tmp_path, keep):
    store = PrefixDisk(tmp_path, 2**30, min_tokens=8)
    tokens = list(range(64))
    path = write_now(store, tokens, kv_cache(64))
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    found = store.longest(KEY, [*tokens, 1], 64)
    assert store.read(found, [*tokens, 1]) is None
    assert not path.exists()
    assert (store.state().misses, store.state().failed_reads) == (1, 1)


def test_a_reopened_store_finds_what_was_written(tmp_path):
    tokens = list(range(50))
    write_now(PrefixDisk(tmp_path, 2**30, min_tokens=8), tokens, kv_cache(50))
    store = PrefixDisk(tmp_path, 2**30, min_tokens=8)
    found = store.longest(KEY, [*tokens, 3], 50)
    assert found is not None
    assert same_arrays(held(store.read(found, [*tokens, 3])[0]), held(kv_cache(50)[0]))


def test_the_folder_keeps_under_its_cap_least_recently_used_first(tmp_path):
    first = PrefixDisk(tmp_path, 2**30, min_tokens=8)
    a, b, c = ([n] * 40 for n in (1, 2, 3))
    path_a = write_now(first, a, kv_cache(40))
    size = path_a.stat().st_size
    store = PrefixDisk(tmp_path, int(size * 2.5), min_tokens=8)
    path_b = write_now(store, b, kv_cache(40))
    # Reading a makes b the least recently used, also for a store opened later (file times).
    assert store.read(store.longest(KEY, [*a, 0], 40), [*a, 0]) is not None
    path_c = write_now(store, c, kv_cache(40))
    assert stored(tmp_path) == sorted([path_a, path_c])
    assert not path_b.exists()
    assert store.state().bytes == 2 * size <= store.max_bytes
    # A store opened with a smaller cap evicts at once, the least recently used first.
    os.utime(path_c, (time.time() - 100, time.time() - 100))
    smaller = PrefixDisk(tmp_path, int(size * 1.5), min_tokens=8)
    assert stored(tmp_path) == [path_a] and smaller.state().entries == 1


def test_writes_are_atomic_and_owner_only(tmp_path):
    folder = tmp_path / "cache"
    store = PrefixDisk(folder, 2**30, min_tokens=8)
    path = write_now(store, list(range(30)), kv_cache(30))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(folder.iterdir()) == [path]  # no temporary file left behind

    # A write that fails halfway (the file may not grow past 4 KiB: the OS refuses the
    # rest, as a full disk would) leaves neither the entry nor its temporary file.
    prepared = kv_file.prepare(list(range(20)), kv_cache(20))
    assert prepared.nbytes > 4096
    target = folder / prefix_disk.entry_name(KEY, 20, kv_file.token_digest(list(range(20))))
    with files_under(4096), pytest.raises(OSError, match="too large"):
        kv_file.write(target, prepared)
    assert sorted(folder.iterdir()) == [path]
    # Through the store's writer: counted, shown in /health and /metrics, nothing left.
    with files_under(4096):
        assert store.offer(KEY, list(range(20)), kv_cache(20))
        assert store.flush(timeout=60)
    assert (store.state().failed_writes, store.state().writes) == (1, 1)
    assert sorted(folder.iterdir()) == [path]


def test_a_file_waits_while_an_engine_computes(tmp_path, monkeypatch):
    """Written beside a step, a file slowed it (the kernels' threads wait for each other): a
    write goes on only while no engine says it is busy, or after WRITE_DEFER_SECONDS."""
    monkeypatch.setattr(prefix_disk, "WRITE_DEFER_SECONDS", 30.0)
    store = PrefixDisk(tmp_path / "store", 2**30, min_tokens=16)
    store.busy(1, True)
    store.busy(2, True)
    assert store.offer(KEY, list(range(20)), kv_cache(20))
    assert not store.flush(timeout=0.5) and not stored(store.folder)
    store.busy(1, False)  # the other engine still computes
    assert not store.flush(timeout=0.3)
    store.busy(2, False)
    assert store.flush(timeout=10) and len(stored(store.folder)) == 1
    monkeypatch.setattr(prefix_disk, "WRITE_DEFER_SECONDS", 0.2)  # never idle: written anyway
    store.busy(1, True)
    assert store.offer(KEY, list(range(40)), kv_cache(40))
    assert store.flush(timeout=30) and len(stored(store.folder)) == 2
    store.close()


def test_an_entry_taken_back_before_it_is_written_never_is(tmp_path, monkeypatch):
    """A conversation's next turn grows its KV in the entry's own arrays: the entry's disk
    write is taken back first (its views would make the engine copy the arrays whole),
    whether its writing had begun (stopped before its next array) or it still waited."""
    monkeypatch.setattr(prefix_disk, "WRITE_DEFER_SECONDS", 30.0)
    store = PrefixDisk(tmp_path / "store", 2**30, min_tokens=16)
    store.busy(1, True)
    begun, waiting = list(range(20)), list(range(30))
    assert store.offer(KEY, begun, kv_cache(20)) and store.offer(KEY, waiting, kv_cache(30))
    time.sleep(0.2)  # the writer has begun the first, and waits for the engine to be idle
    started = time.monotonic()
    assert store.withdraw(KEY, begun) and store.withdraw(KEY, waiting)
    assert time.monotonic() - started < prefix_disk.WITHDRAW_WAIT_SECONDS
    store.busy(1, False)
    assert store.flush(timeout=10) and not stored(store.folder)
    assert store.offer(KEY, begun, kv_cache(20))  # offered again (its next turn's end)
    assert store.flush(timeout=10) and len(stored(store.folder)) == 1
    assert store.withdraw(KEY, begun)  # written: nothing holds its arrays any more
    assert len(stored(store.folder)) == 1
    store.close()


@contextmanager
def files_under(limit: int) -> Iterator[None]:
    """The OS refuses to let any file of this process grow past `limit` bytes, as a full
    disk would (EFBIG, not the SIGXFSZ kill)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_crashed_writers_temporary_files_are_cleared_when_old(tmp_path):
    old, fresh = tmp_path / ".x.kv.1.ab.tmp", tmp_path / ".y.kv.1.cd.tmp"
    old.write_bytes(b"partial")
    fresh.write_bytes(b"being written by another process")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    PrefixDisk(tmp_path, 2**30)
    assert not old.exists() and fresh.exists()


def test_a_changed_model_never_reads_the_old_entries(tmp_path):
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    (weights / "model.safetensors").write_bytes(b"x" * 100)
    spec = ModelSpec(model_id="m", location=str(weights))
    key = model_key(spec, "float32", True)
    assert model_key(spec, "float32", True) == key
    others = {
        model_key(ModelSpec(model_id="n", location=str(weights)), "float32", True),
        model_key(ModelSpec(model_id="m", location=str(weights), kv_cache="8bit"), "float32", True),
        model_key(spec, "bfloat16", True),
        model_key(spec, "float32", False),
    }
    assert key not in others and len(others) == 4
    store = PrefixDisk(tmp_path / "cache", 2**30, min_tokens=8)
    tokens = list(range(30))
    write_now(store, tokens, kv_cache(30), key=key)
    (weights / "model.safetensors").write_bytes(b"y" * 101)  # new weights, same place
    changed = model_key(spec, "float32", True)
    assert changed != key
    assert store.longest(changed, [*tokens, 1], 30) is None
    assert store.longest(key, [*tokens, 1], 30) is not None


class GatedDisk(PrefixDisk):
    """A store whose writer waits at a gate before each write: the engine offering faster
    than the disk takes, without depending on the machine's speed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()

    def _write(self, name, prepared) -> None:
        self.gate.wait(timeout=60)
        super()._write(name, prepared)


def test_a_full_writer_queue_drops_entries_without_waiting(tmp_path):
    store = GatedDisk(tmp_path, 2**30, min_tokens=8)
    offers = QUEUE_SIZE + 4
    started = time.perf_counter()
    queued = [store.offer(KEY, [n] * 20, kv_cache(20)) for n in range(offers)]
    assert time.perf_counter() - started < 5  # never blocked on the writer
    # The writer holds one at its gate, the queue the next QUEUE_SIZE; the rest are dropped.
    deadline = time.monotonic() + 10
    while sum(queued) <= QUEUE_SIZE and time.monotonic() < deadline:
        queued.append(store.offer(KEY, [offers + len(queued)] * 20, kv_cache(20)))
    written = sum(queued)
    assert store.state().dropped_writes == len(queued) - written > 0
    assert stored(tmp_path) == []
    store.gate.set()
    assert store.flush(timeout=60)
    assert len(stored(tmp_path)) == written == store.state().writes
    # An entry already stored, or shorter than the tier's minimum, is not written again.
    assert not store.offer(KEY, [0] * 20, kv_cache(20))
    assert not store.offer(KEY, [1] * 7, kv_cache(7))


# A runner after a restart, or after the pool evicted its model.


@pytest.fixture(scope="module")
def model_dir(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("disk-tier") / "tiny-untied"
    build_tiny_model(smollm_dir, path, tie_word_embeddings=False)
    return path


def load(model_dir: Path, pool: ModelPool | None = None) -> LoadedModel:
    return (pool or ModelPool(2**30)).get(
        ModelSpec(model_id="tiny-untied", location=str(model_dir))
    )


def generate(runner: ModelRunner, loaded: LoadedModel, ids: list[int]) -> tuple[Sequence, Done]:
    sequence = make_sequence(loaded, ids, greedy(6))
    runner.add(sequence)
    events = []
    for _ in range(200):
        if sequence.finished:
            break
        events += [e for s, batch in runner.step() if s is sequence for e in batch]
    while runner.busy:  # as the engine does: the finished turn's KV is kept (and offered)
        runner.step()
    assert isinstance(events[-1], Done)
    return sequence, events[-1]


def disk_config(folder: Path) -> EngineConfig:
    return EngineConfig(prefix_cache_dir=str(folder), prefix_cache_disk_min_tokens=16)


def test_after_a_restart_a_prompt_reuses_its_prefix_from_disk(model_dir, tmp_path):
    config = disk_config(tmp_path)
    loaded = load(model_dir)
    ids = list(loaded.tokenizer.encode(LONG))
    first, done = generate(ModelRunner(loaded, config), loaded, ids)
    assert done.cached_tokens == 0
    prefix_disk.shared(config).close()  # writes what is queued; the process "ends"
    assert len(stored(tmp_path)) == 1

    follow_up = ids + first.fed[1:] + list(loaded.tokenizer.encode(" And then?"))
    restarted = load(model_dir)  # read again, as a new process would
    runner = ModelRunner(restarted, config)
    again, done = generate(runner, restarted, follow_up)
    assert done.cached_tokens == len(ids) - 1
    cold, cold_done = generate(ModelRunner(restarted, EngineConfig(prompt_cache_bytes=0)),
                               restarted, follow_up)  # fmt: skip
    assert cold_done.cached_tokens == 0
    assert again.fed == cold.fed
    disk = prefix_disk.shared(config)
    assert (disk.hits, runner.prefixes.stats.disk_hits) == (1, 1)
    disk.close()


def test_a_damaged_entry_gives_a_cold_read_with_the_same_tokens(model_dir, tmp_path):
    config = disk_config(tmp_path)
    loaded = load(model_dir)
    ids = list(loaded.tokenizer.encode(LONG))
    first, _ = generate(ModelRunner(loaded, config), loaded, ids)
    prefix_disk.shared(config).close()
    (path,) = stored(tmp_path)
    path.write_bytes(path.read_bytes()[:-1000])
    again, done = generate(ModelRunner(loaded, config), loaded, ids)
    assert done.cached_tokens == 0 and again.fed == first.fed
    disk = prefix_disk.shared(config)
    assert (disk.misses, disk.failed_reads) == (1, 1)
    disk.close()


def test_a_model_the_pool_evicted_finds_its_prefixes_on_disk(model_dir, tmp_path):
    config = disk_config(tmp_path)
    pool = ModelPool(2**30)
    loaded = load(model_dir, pool)
    ids = list(loaded.tokenizer.encode(LONG))
    first, _ = generate(ModelRunner(loaded, config), loaded, ids)
    assert prefix_disk.shared(config).flush(timeout=60)
    pool.unload("tiny-untied")
    assert len(stored(tmp_path)) == 1  # unloading keeps the model's entries
    reloaded = load(model_dir, pool)
    again, done = generate(ModelRunner(reloaded, config), reloaded, ids)
    assert done.cached_tokens == len(ids) - 1 and again.fed == first.fed
    prefix_disk.shared(config).close()


def test_no_folder_no_disk_tier(model_dir):
    loaded = load(model_dir)
    runner = ModelRunner(loaded, EngineConfig())
    assert runner.prefixes is not None and runner.prefixes.disk is None
    off = EngineConfig(prefix_cache_dir="/nonexistent-but-unused", prefix_cache_disk_bytes=0)
    assert prefix_disk.shared(off) is None


def test_an_unusable_folder_leaves_prefixes_in_memory(model_dir, tmp_path):
    (tmp_path / "a-file").write_text("")
    config = disk_config(tmp_path / "a-file" / "cache")  # a folder that cannot be made
    loaded = load(model_dir)
    runner = ModelRunner(loaded, config)
    assert runner.prefixes is not None and runner.prefixes.disk is None
    ids = list(loaded.tokenizer.encode(LONG))
    first, _ = generate(runner, loaded, ids)
    again, done = generate(runner, loaded, ids)
    assert done.cached_tokens == len(ids) - 1 and again.fed == first.fed
