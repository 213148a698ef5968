"""One model over two processes: a 2-rank MLX ring group on loopback, rank 0 serving HTTP and
rank 1 a `manage.py serve --follower`, the model split tensor-parallel between them (and a
Qwen2 split as a pipeline, and one held whole on each rank). Greedy answers must be token for
token those of the same model in one process; a lost follower must turn rank 0 not ready, with
503s, instead of hanging."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.helpers import build_tiny_model
from tests.support.live_server import ADMIN_TOKEN, group_server, live_server

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}  # /health's details are for operators

pytestmark = pytest.mark.database_independent  # runs once: each server has its own SQLite

PROMPTS = ["Hello there", "Write a list of colours.", "What is 2 + 2?", "Tell me a story."]
GREEDY = {"temperature": 0, "max_tokens": 24}


def model_setup(tiny_dir: Path, *extra: str, model_id: str = "tiny") -> tuple[str, ...]:
    # float32 on both sides: the kernels' formats are not what is being compared here.
    return ("add_model", model_id, "--local", str(tiny_dir), "--compute-format", "float32", *extra)


@pytest.fixture(scope="module")
def qwen2_dir(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mlx-lm's llama has no pipeline(); its qwen2 does (2 layers: one per rank)."""
    target = tmp_path_factory.mktemp("qwen2") / "tiny-qwen2"
    return build_tiny_model(smollm_dir, target, seed=1, model_type="qwen2")


def embedder_setup(decoder_embedder_dir: Path) -> tuple[str, ...]:
    return ("add_model", "embedder", "--embedding", "--local", str(decoder_embedder_dir))


@pytest.fixture(scope="module")
def single(
    tiny_dir: Path,
    qwen2_dir: Path,
    decoder_embedder_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
):
    setup = (
        model_setup(tiny_dir),
        model_setup(tiny_dir, model_id="tiny-whole"),
        model_setup(qwen2_dir, model_id="tiny-qwen2"),
        embedder_setup(decoder_embedder_dir),
    )
    with live_server(tmp_path_factory.mktemp("single"), *setup) as server:
        yield server


@pytest.fixture(scope="module")
def group(
    tiny_dir: Path,
    qwen2_dir: Path,
    decoder_embedder_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
):
    setup = (
        model_setup(tiny_dir, "--parallel", "tensor"),
        model_setup(tiny_dir, model_id="tiny-whole"),
        model_setup(qwen2_dir, "--parallel", "pipeline", model_id="tiny-qwen2"),
        embedder_setup(decoder_embedder_dir),
    )
    var = tmp_path_factory.mktemp("group")
    with group_server(var, *setup, DISTRIBUTED_TIMEOUT="10") as group:
        yield group


def client(server) -> openai.OpenAI:
    return server.openai()


def answer(server, prompt: str, model: str = "tiny", **params) -> openai.types.chat.ChatCompletion:
    messages = [{"role": "user", "content": prompt}]
    return client(server).chat.completions.create(
        model=model, messages=messages, **{**GREEDY, **params}
    )


def streamed(server, prompt: str, **params) -> str:
    messages = [{"role": "user", "content": prompt}]
    chunks = client(server).chat.completions.create(
        model="tiny", messages=messages, stream=True, **{**GREEDY, **params}
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def loaded_bytes(server) -> int:
    warm = httpx.post(
        f"{server.url}/control/models/tiny/warm", headers=server.admin_headers, timeout=60
    )
    assert warm.status_code == 200, warm.text
    pool = httpx.get(f"{server.url}/control/pool", headers=server.admin_headers, timeout=30)
    return next(m["bytes"] for m in pool.json()["models"] if m["id"] == "tiny")


def test_the_group_reports_itself_and_holds_a_shard(single, group) -> None:
    ring = {"rank": 0, "size": 2, "backend": "ring"}
    assert group.leader.health(timeout=10)["distributed"] == ring
    assert single.health(timeout=10)["distributed"] is None
    # The layers' projections are halved; embeddings and the head stay whole on each rank.
    whole, shard = loaded_bytes(single), loaded_bytes(group.leader)
    assert shard < whole
    deadline = time.monotonic() + 10  # the follower logs its load just after the barrier
    while "loaded tiny" not in group.follower_logs[0].read_text():
        assert time.monotonic() < deadline, group.follower_logs[0].read_text()
        time.sleep(0.1)


def test_greedy_answers_match_one_process_token_for_token(single, group) -> None:
    for prompt in PROMPTS:
        alone, split = (
            answer(single, prompt, logprobs=True, top_logprobs=3),
            answer(group.leader, prompt, logprobs=True, top_logprobs=3),
        )
        assert split.choices[0].message.content == alone.choices[0].message.content
        assert split.usage.completion_tokens == alone.usage.completion_tokens == 24
        ours = [t.token for t in split.choices[0].logprobs.content]
        theirs = [t.token for t in alone.choices[0].logprobs.content]
        assert ours == theirs
        ours_lp, theirs_lp = split.choices[0].logprobs.content, alone.choices[0].logprobs.content
        for a, b in zip(ours_lp, theirs_lp, strict=True):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-3)


@pytest.mark.parametrize("model", ["tiny-qwen2", "tiny-whole"])
def test_pipelined_and_whole_models_match_too(single, group, model: str) -> None:
    for prompt in PROMPTS[:2]:
        alone, split = answer(single, prompt, model), answer(group.leader, prompt, model)
        assert split.choices[0].message.content == alone.choices[0].message.content


def test_embeddings_go_through_the_group_too(single, group) -> None:
    """An embedding model held whole on each rank: its batches run in the same turns."""
    texts = ["a short one", "a rather longer sentence about the sea and its tides", "x"]
    alone = client(single).embeddings.create(model="embedder", input=texts)
    split = client(group.leader).embeddings.create(model="embedder", input=texts)
    for a, b in zip(alone.data, split.data, strict=True):
        assert b.embedding == pytest.approx(a.embedding, abs=1e-5)


def test_streamed_answers_match(single, group) -> None:
    for prompt in PROMPTS[:2]:
        assert streamed(group.leader, prompt) == answer(single, prompt).choices[0].message.content


def test_eight_concurrent_requests_match(single, group) -> None:
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(8)]
    expected = {p: answer(single, p, max_tokens=40).choices[0].message.content for p in PROMPTS}
    with ThreadPoolExecutor(8) as pool:
        got = list(
            pool.map(
                lambda i: (streamed if i % 2 else _text)(group.leader, prompts[i], max_tokens=40),
                range(8),
            )
        )
    assert got == [expected[p] for p in prompts]


def _text(server, prompt: str, **params) -> str:
    return answer(server, prompt, **params).choices[0].message.content


def test_a_stop_string_ends_both_alike(single, group) -> None:
    full = _text(single, PROMPTS[1])
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip(), full
    alone, split = (
        answer(single, PROMPTS[1], stop=[stop]),
        answer(group.leader, PROMPTS[1], stop=[stop]),
    )
    assert split.choices[0].finish_reason == alone.choices[0].finish_reason == "stop"
    assert split.choices[0].message.content == alone.choices[0].message.content
    assert stop not in split.choices[0].message.content


def test_a_cancelled_stream_leaves_the_group_in_step(single, group) -> None:
    messages = [{"role": "user", "content": PROMPTS[3]}]
    with httpx.stream(
        "POST",
        f"{group.leader.api}/chat/completions",
        json={"model": "tiny", "messages": messages, "stream": True, "max_tokens": 2000},
        timeout=60,
    ) as response:
        events = 0
        for line in response.iter_lines():
            events += line.startswith("data:")
            if events == 3:
                break
        assert events == 3
    # The group drops the cancelled row on every rank at the same step: what comes next
    # still matches one process, beside another stream running.
    running = threading.Thread(target=_text, args=(group.leader, PROMPTS[0]))
    running.start()
    assert _text(group.leader, PROMPTS[2]) == _text(single, PROMPTS[2])
    running.join()
    deadline = time.monotonic() + 10
    while group.leader.health(timeout=10)["running_sequences"]:
        assert time.monotonic() < deadline, "the cancelled stream is still running"
        time.sleep(0.2)


def test_a_lost_follower_makes_rank_0_unready_with_503s(group) -> None:
    """Last in this module: the group does not come back."""
    assert httpx.get(f"{group.leader.url}/health/ready", timeout=5).status_code == 200
    killed = time.monotonic()
    group.followers[0].send_signal(signal.SIGKILL)
    group.followers[0].wait()
    while httpx.get(f"{group.leader.url}/health/ready", timeout=5).status_code != 503:
        assert time.monotonic() - killed < 30, "rank 0 still ready 30 s after its follower died"
        time.sleep(0.25)
    with pytest.raises(openai.APIStatusError) as failed:
        answer(group.leader, PROMPTS[0])
    assert failed.value.status_code == 503
    assert failed.value.body["code"] == "engine_unavailable"
    ready = httpx.get(f"{group.leader.url}/health/ready", headers=ADMIN, timeout=5).json()
    assert any("distributed group lost" in reason for reason in ready["reasons"]), ready
    assert group.leader.process.poll() is None  # rank 0 keeps answering


def test_a_hung_follower_is_found_within_the_timeout(tiny_dir: Path, tmp_path: Path) -> None:
    """A follower that stops answering (SIGSTOP: its sockets stay open, nothing errors)
    leaves rank 0 waiting in a collective: DISTRIBUTED_TIMEOUT bounds the wait."""
    setup = model_setup(tiny_dir, "--parallel", "tensor")
    with group_server(tmp_path, setup, DISTRIBUTED_TIMEOUT="5") as hung:
        assert _text(hung.leader, PROMPTS[0], max_tokens=4)
        follower = hung.followers[0]
        follower.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            while httpx.get(f"{hung.leader.url}/health/ready", timeout=5).status_code != 503:
                assert time.monotonic() - stopped < 30, "rank 0 still ready after 30 s"
                time.sleep(0.25)
            assert time.monotonic() - stopped >= 5  # not before the timeout: it was idle
            with pytest.raises(openai.APIStatusError) as failed:
                answer(hung.leader, PROMPTS[0])
            assert failed.value.status_code == 503
        finally:
            follower.send_signal(signal.SIGCONT)


def test_a_model_one_rank_cannot_load_is_refused_not_hung(tiny_dir: Path, tmp_path: Path) -> None:
    """The follower has no room for the model (its pool budget is 1 KiB): every rank gives the
    load up together, the request gets 503 model_unavailable, and the group stays in step."""
    setup = model_setup(tiny_dir, "--parallel", "tensor")
    tight = {"POOL_MEMORY_BUDGET": "1024"}
    with group_server(tmp_path, setup, follower_settings=tight) as group:
        for _ in range(2):
            with pytest.raises(openai.APIStatusError) as failed:
                answer(group.leader, PROMPTS[0], max_tokens=4)
            assert failed.value.status_code == 503
            assert failed.value.body["code"] == "model_unavailable"
            assert "every rank" in failed.value.body["message"]
        assert httpx.get(f"{group.leader.url}/health/ready", timeout=5).status_code == 200


def test_a_follower_refuses_turns_signed_with_another_secret(
    tiny_dir: Path, tmp_path: Path
) -> None:
    """The follower's DISTRIBUTED_SECRET is not the leader's (as a forger's would not be): it
    refuses the first turn before unpickling it and stops saying why; rank 0 counts the group
    lost."""
    setup = model_setup(tiny_dir, "--parallel", "tensor")
    forged = {"DISTRIBUTED_SECRET": "not the leader's secret at all"}
    with group_server(
        tmp_path, setup, follower_settings=forged, wait_ready=False, DISTRIBUTED_TIMEOUT="5"
    ) as group:
        follower = group.followers[0]
        assert follower.wait(timeout=120) != 0
        assert "bad signature" in group.follower_logs[0].read_text()
        deadline = time.monotonic() + 60
        while True:
            try:
                ready = httpx.get(f"{group.leader.url}/health/ready", headers=ADMIN, timeout=5)
                if ready.status_code == 503 and "distributed group lost" in ready.text:
                    break
            except httpx.TransportError:  # rank 0 still starting
                pass
            assert time.monotonic() < deadline, "rank 0 did not count the group lost"
            time.sleep(0.25)
