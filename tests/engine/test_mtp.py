"""MTP heads as drafters (engine/mtp/), driven through ModelRunner: each family's head is read
from the checkpoint where its real ones keep it, and its drafts never change the text; a head
trained here (a Qwen3.5-shaped hybrid, tests/support/mtp_models.py) is right often enough that rows
keep more than 1.4 tokens a step, in a batch beside n-gram, plain and sampled rows, from a
long prompt and after a prefix-cache hit; a model without a head says why, and a request for
one fails; a head whose guesses fail stops being asked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from inference.engine import cpu
from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.mtp.drafter import MtpDrafter
from inference.engine.mtp.files import missing_heads
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.sequence import Sequence
from inference.engine.types import EngineError, ModelSpec, SamplingParams
from tests.engine.jobs import greedy, make_sequence
from tests.engine.test_runner import Outcome, run
from tests.support.mtp_models import (
    MTP_ARCHS,
    build_float,
    cycle_prompt,
    trained_once,
    with_random_head,
)

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

NO_CACHE = EngineConfig(prompt_cache_bytes=0)
MTP = {"speculative": "mtp", "draft_tokens": 4}


def load(folder: Path, model_id: str) -> LoadedModel:
    return ModelPool(2**31).get(ModelSpec(model_id=model_id, location=str(folder)))


@pytest.fixture(scope="module")
def trained(smollm_dir: Path) -> LoadedModel:
    return load(trained_once(smollm_dir), "mtp-trained")


def steps_to_finish(runner: ModelRunner, sequences: list[Sequence]) -> tuple[list[Outcome], int]:
    """Every sequence run to its end in one batch; their outcomes and the steps it took."""
    outcomes = {id(s): Outcome(s) for s in sequences}
    for sequence in sequences:
        runner.add(sequence)
    steps = 0
    while not all(s.finished for s in sequences):
        steps += 1
        assert steps < 400
        for sequence, events in runner.step():
            outcomes[id(sequence)].events.extend(events)
    return [outcomes[id(s)] for s in sequences], steps


@pytest.mark.parametrize("name", MTP_ARCHS)
def test_each_family_reads_its_head_and_its_drafts_keep_the_text(
    name, smollm_dir, tmp_path_factory
):
    """A random head in the checkpoint's layout (routed experts one by one; Qwen3-Next's norms
    as offsets) is read, drafts, and every greedy token is the model's own."""
    folder = with_random_head(name, smollm_dir, tmp_path_factory)
    assert missing_heads(folder) == ""
    loaded = load(folder, name)
    assert loaded.mtp is not None, loaded.mtp_reason
    if loaded.kernels:  # the head computes as its model does, in the CPU kernels' layers
        kinds = {type(m).__name__ for _, m in loaded.mtp.head.named_modules()}
        assert "KernelRMSNorm" in kinds and not cpu.on_mlx_path(loaded.mtp.head), kinds
    ids = cycle_prompt(0, 12)
    plain = run(ModelRunner(loaded, NO_CACHE), make_sequence(loaded, ids, greedy(16)))[0]
    runner = ModelRunner(loaded, NO_CACHE)
    drafted = run(runner, make_sequence(loaded, ids, greedy(16, **MTP)))[0]
    assert drafted.text == plain.text
    assert runner.speculation.drafters["mtp"][0] > 0


def test_a_model_without_a_head_says_why_and_a_request_for_mtp_fails(
    smollm_dir, tiny_dir, tmp_path
):
    for folder, why in (
        (tiny_dir, "llama models ship no MTP head"),
        (build_float("qwen3_5", smollm_dir, tmp_path / "bare"), "hold no MTP head"),
    ):
        assert why in missing_heads(folder)
        loaded = load(folder, folder.name)
        assert loaded.mtp is None and why in loaded.mtp_reason
        with pytest.raises(EngineError, match=f"no MTP head to draft with \\(.*{why}"):
            make_sequence(loaded, [1, 2, 3], greedy(4, **MTP))


def test_the_trained_head_keeps_over_1_4_tokens_a_step_and_the_text(trained):
    """Three MTP rows in one batch: each keeps most guesses, every token its plain one."""
    prompts = [cycle_prompt(start, 10) for start in (0, 20, 41)]
    plain, plain_steps = steps_to_finish(
        ModelRunner(trained, NO_CACHE), [make_sequence(trained, p, greedy(40)) for p in prompts]
    )
    runner = ModelRunner(trained, NO_CACHE)
    drafted, steps = steps_to_finish(
        runner, [make_sequence(trained, p, greedy(40, **MTP)) for p in prompts]
    )
    assert [o.text for o in drafted] == [o.text for o in plain]
    fed, kept = runner.speculation.drafters["mtp"]
    assert kept >= 0.8 * fed
    assert 40 / steps > 1.4 and plain_steps >= 40
    assert 40 / steps > 2.5  # right guesses four at a time: about 4 tokens a step


def test_a_mixed_batch_keeps_every_rows_tokens(trained):
    """MTP rows (greedy and seeded sampled), an n-gram row and a plain row; two join late:
    each row's tokens are those of its run without drafts (the sampled row's from its seed)."""
    sampled = SamplingParams(temperature=0.8, seed=5, max_tokens=30)
    asks = [
        (cycle_prompt(3, 10), greedy(36), MTP),
        (cycle_prompt(9, 64) + cycle_prompt(9, 10), greedy(24), {"speculative": "ngram"}),
        (cycle_prompt(30, 8), greedy(20), {}),
        (cycle_prompt(50, 12), sampled, MTP),
        (cycle_prompt(12, 6), greedy(30), MTP),
    ]
    plain = [
        run(ModelRunner(trained, NO_CACHE), make_sequence(trained, ids, params))[0].text
        for ids, params, _ in asks
    ]
    runner = ModelRunner(trained, NO_CACHE)
    rows = [make_sequence(trained, ids, replace(p, **extra)) for ids, p, extra in asks]
    outcomes = {id(row): Outcome(row) for row in rows}
    for row in rows[:3]:
        runner.add(row)
    for step in range(200):
        if step == 3:
            for row in rows[3:]:
                runner.add(row)
        for sequence, events in runner.step():
            outcomes[id(sequence)].events.extend(events)
        if all(row.finished for row in rows):
            break
    assert [outcomes[id(row)].text for row in rows] == plain
    mtp_fed, mtp_kept = runner.speculation.drafters["mtp"]
    assert mtp_kept >= 0.7 * mtp_fed > 0
    ngram_fed, ngram_kept = runner.speculation.drafters["ngram"]
    assert ngram_kept >= 0.7 * ngram_fed > 0  # the cycle seen once: lookup copies it


def test_a_long_prompt_is_read_into_the_head_and_a_prefix_hit_still_drafts(trained):
    """A prompt read over several steps (and longer than the head reads a step) drafts as a
    short one does; run again, most of it comes from the prefix cache and the head reads
    only the rest, still right."""
    ids = [t for i in range(10) for t in cycle_prompt(7 * i, 64)][:600]
    plain = run(ModelRunner(trained, NO_CACHE), make_sequence(trained, ids, greedy(30)))[0]
    runner = ModelRunner(trained, EngineConfig(prompt_cache_bytes=2**28))
    for attempt in range(2):
        before = list(runner.speculation.drafters.get("mtp", [0, 0]))
        sequence = make_sequence(trained, ids, greedy(30, **MTP))
        outcome = run(runner, sequence)[0]
        assert outcome.text == plain.text
        fed, kept = (a - b for a, b in zip(runner.speculation.drafters["mtp"], before, strict=True))
        assert fed > 10 and kept >= 0.8 * fed
        assert (sequence.cached_tokens > 500) == (attempt == 1)


def test_a_head_whose_guesses_fail_stops_being_asked(smollm_dir, tmp_path_factory):
    """A random head's guesses are wrong: after a few, its row is no longer asked (each ask
    costs the head's forwards), and what it was not asked stays bounded in memory."""
    loaded = load(with_random_head("qwen3_5", smollm_dir, tmp_path_factory, seed=9), "random")
    runner = ModelRunner(loaded, NO_CACHE)
    sequence = make_sequence(loaded, cycle_prompt(0, 12), greedy(120, **MTP))
    run(runner, sequence)
    fed, kept = runner.speculation.drafters["mtp"]
    assert kept < fed < 60  # asked far less than once a token
    drafter = sequence.drafter
    assert isinstance(drafter, MtpDrafter) and drafter.waiting < 64
