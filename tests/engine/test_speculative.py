"""Speculative decoding inside the decode batch (engine/drafting.py, engine/speculative.py),
driven through ModelRunner on a tiny random model: greedy tokens are the same with and without
it, alone and beside rows that do not speculate, joining and leaving; drafts that are right
are accepted; max_tokens, stop tokens, stop strings and logprobs hold when one step yields
several tokens; a sampled row draws the same tokens from the same seed (so from the same
distribution), whatever its drafts; the n-gram drafter proposes what prompt lookup should."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.draft_model import DRAFT_CHUNK, ModelDrafter
from inference.engine.drafting import Drafter, NgramDrafter, make_drafter
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.sampling import RowSampler, sample
from inference.engine.sequence import Sequence
from inference.engine.speculative import TrackRecord, best_width, kept, worth_asking
from inference.engine.types import EngineError, ModelSpec, SamplingParams
from tests.engine.jobs import NO_EOS, greedy, make_sequence
from tests.engine.test_runner import LONG, SHORT, Outcome, ids_of, run
from tests.support.helpers import build_tiny_model

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

NO_CACHE = EngineConfig(prompt_cache_bytes=0)
NGRAM = {"speculative": "ngram", "draft_tokens": 4}
REPEAT = " ".join(["for i in range(10): total += values[i] * weight"] * 6)


@pytest.fixture(scope="module")
def loaded(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    """The tiny random model with an output head of its own and 64-wide heads (so 8-bit K/V
    applies)."""
    path = tmp_path_factory.mktemp("spec") / "tiny"
    build_tiny_model(smollm_dir, path, tie_word_embeddings=False, head_dim=64)
    return ModelPool(2**30).get(ModelSpec(model_id="tiny-spec", location=str(path)))


class Oracle(Drafter):
    """Drafts a known continuation of the prompt (another run's tokens), optionally wrong at
    some positions: the acceptance rule must keep exactly the right part."""

    def __init__(self, prompt: list[int], script: list[int], wrong: set[int] = frozenset()):
        self.produced = 0
        self.script = [t + 1 if i in wrong else t for i, t in enumerate(script)]

    def extend(self, tokens: list[int]) -> None:
        self.produced += len(tokens)

    def propose(self, limit: int) -> list[int]:
        return self.script[self.produced : self.produced + min(limit, 6)]


def generated(outcome: Outcome) -> list[int]:
    """The tokens of the answer that went back into the cache (all but the last)."""
    sequence = outcome.sequence
    return sequence.fed[1 : sequence.completion_tokens]


def solo(loaded: LoadedModel, text: str, params: SamplingParams, **extra) -> Outcome:
    runner = ModelRunner(loaded, NO_CACHE)
    return run(runner, make_sequence(loaded, ids_of(loaded, text), params, **extra))[0]


def with_oracle(loaded, text, params, script, wrong=frozenset(), **extra) -> Sequence:
    sequence = make_sequence(loaded, ids_of(loaded, text), params, **extra)
    sequence.drafter = Oracle(sequence.prompt, script, set(wrong))
    return sequence


def same(a: Outcome, b: Outcome) -> None:
    assert a.text == b.text
    assert generated(a) == generated(b)
    assert a.done == b.done


def test_greedy_tokens_are_the_same_with_ngram_drafts(loaded):
    for text in (REPEAT, SHORT):
        plain = solo(loaded, text, greedy(40))
        runner = ModelRunner(loaded, NO_CACHE)
        (spec,) = run(runner, make_sequence(loaded, ids_of(loaded, text), greedy(40, **NGRAM)))
        same(spec, plain)
        assert runner.speculation.steps > 0


def test_right_drafts_are_accepted_and_wrong_ones_cost_nothing(loaded):
    plain = solo(loaded, LONG, greedy(30))
    script = plain.sequence.fed[1:] + [0] * 10  # the answer, as it will come
    for wrong in (set(), {3, 4, 11, 20}):
        runner = ModelRunner(loaded, NO_CACHE)
        (spec,) = run(runner, with_oracle(loaded, LONG, greedy(30), script, wrong))
        same(spec, plain)
        stats = runner.speculation
        assert stats.accepted > 0 and stats.steps < 30
        if not wrong:  # every draft token kept: six a step, up to the end
            assert stats.accepted == stats.drafted


def schedule(loaded: LoadedModel, sequences: list[Sequence]) -> tuple[list[Outcome], Any]:
    """The first two sequences decode, the others join after five tokens; every one runs to
    its end (they leave at different times). Each one's outcome, and the runner's counts."""
    runner = ModelRunner(loaded, NO_CACHE)
    outcomes = {id(s): Outcome(s) for s in sequences}

    def step() -> None:
        for sequence, events in runner.step():
            outcomes[id(sequence)].events.extend(events)

    for sequence in sequences[:2]:
        runner.add(sequence)
    while sequences[0].completion_tokens < 5:
        step()
    for sequence in sequences[2:]:
        runner.add(sequence)
    for _ in range(200):
        if all(s.finished for s in sequences):
            break
        step()
    assert all(s.finished for s in sequences)
    return [outcomes[id(s)] for s in sequences], runner.speculation


def test_a_mixed_batch_keeps_every_rows_tokens(loaded):
    """Speculating rows (n-gram and scripted), plain greedy rows and a sampled row share the
    batch; rows join late and leave at different times; each row's tokens are those of the
    same schedule without speculation, and the greedy rows' those of their own run alone."""
    sampled = SamplingParams(temperature=0.5, top_k=8, seed=7, max_tokens=12)
    asks = [
        (REPEAT, greedy(24), True),
        (SHORT, greedy(9), False),
        (LONG, greedy(17), True),
        (SHORT, sampled, True),
        (REPEAT, greedy(20), False),
        (LONG, greedy(15), False),
    ]
    script = solo(loaded, LONG, greedy(15)).sequence.fed[1:] + [0] * 10
    plain, _ = schedule(loaded, [make_sequence(loaded, ids_of(loaded, t), p) for t, p, _ in asks])
    speculating = [
        make_sequence(loaded, ids_of(loaded, t), replace(p, **NGRAM) if ngram else p)
        for t, p, ngram in asks[:-1]
    ]
    speculating.append(with_oracle(loaded, LONG, greedy(15), script, {5}))
    outcomes, stats = schedule(loaded, speculating)
    for outcome, reference in zip(outcomes, plain, strict=True):
        same(outcome, reference)
    for outcome, (text, params, _) in zip(outcomes, asks, strict=True):
        if params.temperature == 0:
            same(outcome, solo(loaded, text, params))
    assert stats.accepted > 0


def test_quantized_and_float16_kv_roll_back_rejected_positions(loaded):
    for kind in ("8bit", "float16"):
        model = replace(loaded, spec=replace(loaded.spec, kv_cache=kind), active=0)
        plain = [solo(model, t, greedy(n)) for t, n in ((LONG, 14), (SHORT, 10))]
        script = plain[0].sequence.fed[1:] + [0] * 10
        runner = ModelRunner(model, NO_CACHE)
        outcomes = run(
            runner,
            with_oracle(model, LONG, greedy(14), script, {2, 7}),
            make_sequence(model, ids_of(model, SHORT), greedy(10)),
        )
        for outcome, reference in zip(outcomes, plain, strict=True):
            same(outcome, reference)


def finished_caches(runner: ModelRunner) -> list[tuple[Sequence, list[Any], bool]]:
    """What the runner hands the prefix cache as rows end: each row, its extracted cache, and
    whether roll_back had moved some of its positions."""
    captured, extract = [], runner._decode.extract

    def capture(index: int, leaving: bool = False) -> list[Any]:
        layers = extract(index, leaving)
        moved = runner._decode._orders[index] is not None
        captured.append((runner._decode.rows[index], layers, moved))
        return layers

    runner._decode.extract = capture
    return captured


def test_rows_moved_by_roll_back_reach_the_prefix_cache_in_token_order(loaded):
    """Rows that reject different numbers of draft tokens keep their rejected slots by moving
    their first positions into them (no roll of the whole cache); the cache each row leaves
    is the one a plain run of its tokens leaves, position by position."""
    asks = ((LONG, 14), (LONG, 16))
    plain, references = [], []
    for text, n in asks:
        runner = ModelRunner(loaded, EngineConfig())
        caches = finished_caches(runner)
        plain.append(run(runner, make_sequence(loaded, ids_of(loaded, text), greedy(n)))[0])
        references.append(caches[0][1])
    runner = ModelRunner(loaded, EngineConfig())
    caches = finished_caches(runner)
    scripts = [p.sequence.fed[1:] + [0] * 10 for p in plain]
    outcomes = run(
        runner,
        with_oracle(loaded, LONG, greedy(14), scripts[0], {2, 7}),
        with_oracle(loaded, LONG, greedy(16), scripts[1], {4}),
    )
    for outcome, reference in zip(outcomes, plain, strict=True):
        same(outcome, reference)
    assert any(moved for _, _, moved in caches)
    by_row = {id(sequence): layers for sequence, layers, _ in caches}
    for outcome, reference in zip(outcomes, references, strict=True):
        layers = by_row[id(outcome.sequence)]
        for mine, theirs in zip(layers, reference, strict=True):
            assert mine.offset == theirs.offset
            n = theirs.offset
            for a, b in ((mine.keys, theirs.keys), (mine.values, theirs.values)):
                assert mx.allclose(a[..., :n, :], b[..., :n, :], atol=1e-3).item()


def test_max_tokens_and_stops_hold_inside_an_accepted_draft(loaded):
    plain = solo(loaded, LONG, greedy(30))
    script = plain.sequence.fed[1:] + [0] * 10
    # max_tokens reached in the middle of a six-token draft.
    for n in (1, 2, 7, 9):
        (out,) = run(ModelRunner(loaded, NO_CACHE), with_oracle(loaded, LONG, greedy(n), script))
        assert out.done.finish_reason == "length" and out.done.completion_tokens == n
        assert out.text == solo(loaded, LONG, greedy(n)).text
    # A stop token the answer reaches inside a draft.
    stop = script[8]
    first = script.index(stop)
    ids = frozenset({stop})
    reference = solo(loaded, LONG, greedy(30), stop_ids=ids)
    sequence = with_oracle(loaded, LONG, greedy(30), script, stop_ids=ids)
    (out,) = run(ModelRunner(loaded, NO_CACHE), sequence)
    assert out.done.finish_reason == "stop" and out.done.completion_tokens == first + 1
    assert out.text == reference.text and out.done == reference.done
    # A stop string inside a draft: the text ends before it, as without speculation.
    cut = plain.text[len(plain.text) // 2 : len(plain.text) // 2 + 3]
    reference = solo(loaded, LONG, greedy(30, stop=(cut,)))
    (out,) = run(
        ModelRunner(loaded, NO_CACHE), with_oracle(loaded, LONG, greedy(30, stop=(cut,)), script)
    )
    assert out.text == reference.text and out.done == reference.done


def test_logprobs_ride_with_every_accepted_token(loaded):
    params = greedy(12, logprobs=True, top_logprobs=2)
    plain = solo(loaded, LONG, params)
    script = plain.sequence.fed[1:] + [0] * 10
    (out,) = run(ModelRunner(loaded, NO_CACHE), with_oracle(loaded, LONG, params, script, {6}))
    ours = [lp for e in out.events if hasattr(e, "logprobs") for lp in e.logprobs]
    theirs = [lp for e in plain.events if hasattr(e, "logprobs") for lp in e.logprobs]
    assert len(ours) == len(theirs) == 12
    for a, b in zip(ours, theirs, strict=True):
        assert a.token == b.token and a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert [c.token for c in a.top] == [c.token for c in b.top]


@pytest.mark.parametrize("filters", [{}, {"top_k": 8}])
def test_a_seed_draws_the_same_tokens_whatever_the_drafts(loaded, filters):
    """Each position draws with the row's next uniform, and only kept positions use theirs:
    drafts right, wrong or from prompt lookup, a seed gives the tokens it gives without
    speculation (so they come from the same distribution). (top_p over this random model's
    flat distribution would not show it: its sort orders near-equal logits by their last
    bits, which a wider forward changes; the next test covers top_p by distribution.)"""
    for seed in range(4):
        params = SamplingParams(
            temperature=0.9, seed=seed, max_tokens=16, logit_bias=NO_EOS, **filters
        )
        plain = solo(loaded, REPEAT, params)
        script = plain.sequence.fed[1:] + [0] * 10
        for wrong in (set(), {1, 2, 9}):
            runner = ModelRunner(loaded, NO_CACHE)
            (out,) = run(runner, with_oracle(loaded, REPEAT, params, script, wrong))
            same(out, plain)
            assert runner.speculation.accepted > 0
        same(solo(loaded, REPEAT, replace(params, **NGRAM)), plain)


def first_tokens(loaded: LoadedModel, params: SamplingParams, script: list[int] | None):
    """The first two tokens of 150 seeded runs, in one batch (drafting `script` if given)."""
    runner, sequences = ModelRunner(loaded, replace(NO_CACHE, max_batch=150)), []
    for seed in range(150):
        ask = replace(params, seed=1000 + seed)
        sequence = make_sequence(loaded, ids_of(loaded, SHORT), ask, group=str(seed))
        if script is not None:
            sequence.drafter = Oracle(sequence.prompt, script)
        sequences.append(sequence)
    run(runner, *sequences)
    return Counter(tuple(s.fed[1:3]) for s in sequences)


def test_top_p_rows_keep_their_distribution_with_drafts(loaded):
    """Low temperature and top_p 0.9 on the tiny model: a few likely first tokens. Drafting
    the greedy answer, the first two tokens' counts over 150 seeds match those without drafts
    (chi-square homogeneity over the pairs seen 5 times or more, p = 0.001)."""
    params = SamplingParams(temperature=0.05, top_p=0.9, max_tokens=3, logit_bias=NO_EOS)
    script = solo(loaded, SHORT, greedy(3)).sequence.fed[1:] + [0] * 4
    plain = first_tokens(loaded, params, None)
    drafted = first_tokens(loaded, params, script)
    keys = [k for k in plain.keys() | drafted.keys() if plain[k] + drafted[k] >= 10]
    rest = (150 - sum(plain[k] for k in keys), 150 - sum(drafted[k] for k in keys))
    table = [(plain[k], drafted[k]) for k in keys] + ([rest] if sum(rest) else [])
    assert len(table) >= 2  # the test needs more than one outcome to compare
    chi2 = sum((a - b) ** 2 / (a + b) for a, b in table)  # equal totals: the 2xk formula
    limits = {2: 10.8, 3: 13.8, 4: 16.3, 5: 18.5, 6: 20.5, 7: 22.5, 8: 24.3}
    assert chi2 < limits.get(len(table), 30.0), (chi2, table)


def test_the_acceptance_rule_keeps_the_target_distribution():
    """Fixed logits, a draft of the most likely token: the first token kept follows p (chi-
    square over 20,000 draws), and the draft is kept with probability p(draft)."""
    probs = mx.array([0.5, 0.2, 0.15, 0.1, 0.05])
    logits = mx.log(probs)[None, :]
    rng, n, counts, accepted = random.Random(1), 20000, [0] * 5, 0
    rows = [RowSampler(greedy=False, rng=rng) for _ in range(n)]
    given: list[float | None] = [rng.random() for _ in range(n)]
    tokens, _ = sample(mx.repeat(logits, n, axis=0), rows, False, given)
    for token in tokens:
        keep = kept([token], [0])
        accepted += keep
        counts[token] += 1
    expected = [p * n for p in probs.tolist()]
    chi2 = sum((c - e) ** 2 / e for c, e in zip(counts, expected, strict=True))
    assert chi2 < 18.5  # 4 degrees of freedom, p = 0.001
    assert abs(accepted / n - 0.5) < 0.02


def test_the_ngram_drafter_looks_up_the_latest_occurrence():
    drafter = NgramDrafter([1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3], length=3)
    # [2, 3] ends last at 7 (then 8, 1...); the trigram [1, 2, 3] at 2 (then 4, 5, 9).
    assert drafter.propose(10) == [4, 5, 9]
    drafter.extend([4, 5])  # right so far: the next draft continues from the same place
    assert drafter.propose(10) == [9, 2, 3]
    drafter.extend([6])  # wrong: [5, 6] is new, [6] too: nothing to propose
    assert drafter.propose(10) == []
    drafter.extend([2, 3])  # [6, 2, 3] is new; [2, 3] last occurred ending at 12
    assert drafter.propose(2) == [4, 5]
    assert NgramDrafter([5, 5], length=4).propose(4) == [5]
    assert NgramDrafter([7], length=4).propose(4) == []


def test_a_bad_speculative_ask_fails_the_request():
    with pytest.raises(EngineError, match="speculative"):
        make_drafter(SamplingParams(speculative="model"), [1, 2])
    with pytest.raises(EngineError, match="draft_tokens"):
        make_drafter(SamplingParams(speculative="ngram", draft_tokens=0), [1, 2])
    assert make_drafter(SamplingParams(), [1, 2]) is None


def test_drafts_are_cut_to_what_is_expected_to_pay_for_its_place():
    """A row whose drafts keep being right gets a wide step; rows whose drafts fail stop
    drafting, and more rows (a costlier position on a CPU) make the step narrower."""
    right, wrong = TrackRecord(), TrackRecord()
    for _ in range(6):
        right.update(fed=4, kept=4)
        wrong.update(fed=4, kept=0)
    assert right.p > 0.95 and wrong.p < 0.1
    draft = [1, 2, 3, 4, 5, 6, 7, 8]
    assert best_width([draft], [right]) == 9
    assert best_width([draft], [wrong]) == 1
    assert best_width([draft] * 8, [TrackRecord()] * 8) < best_width([draft], [TrackRecord()])
    assert best_width([[], []], [right, right]) == 1
    wrong.rest()
    assert wrong.p > 0.06  # a row that stopped drafting slowly regains the benefit of the doubt


def test_a_model_that_replays_rejections_drafts_narrower_and_only_what_pays():
    """Recurrent state and windows feed a rejected step's kept tokens again (rewind.py): the
    expected second pass makes doubtful drafts narrower or not worth a place at all, while
    drafts that keep being right cost no replay and keep their width."""
    right, doubtful = TrackRecord(), TrackRecord()
    for _ in range(6):
        right.update(fed=8, kept=8)
        doubtful.update(fed=4, kept=1)
    draft = [1, 2, 3, 4, 5, 6, 7, 8]
    assert best_width([draft], [right], replays=True) == 9
    assert best_width([draft], [TrackRecord()], replays=True) < best_width([draft], [TrackRecord()])
    assert best_width([draft], [doubtful]) > 1 == best_width([draft], [doubtful], replays=True)


@pytest.fixture(scope="module")
def drafted(loaded: LoadedModel, smollm_dir: Path, tmp_path_factory) -> dict[str, LoadedModel]:
    """The tiny model loaded with a draft model: itself (every draft right), and a random model
    of another seed (drafts mostly wrong)."""
    other = tmp_path_factory.mktemp("spec-draft") / "other"
    build_tiny_model(smollm_dir, other, seed=5, tie_word_embeddings=False, head_dim=64)
    pool, models = ModelPool(2**30), {}
    for name, location in (("self", loaded.spec.location), ("other", str(other))):
        draft = ModelSpec(model_id=f"draft-{name}", location=location)
        spec = replace(loaded.spec, model_id=f"tiny-{name}", draft=draft)
        models[name] = pool.get(spec)
    return models


DRAFT = {"speculative": "draft_model", "draft_tokens": 5}


def test_a_draft_model_keeps_the_greedy_tokens_and_a_right_one_is_accepted(loaded, drafted):
    """A draft model proposes from its own cache, cut back to the accepted tokens each step:
    drafting with the model itself keeps every draft token; a wrong draft model costs
    positions, never tokens; a draft model row shares the batch with plain and n-gram rows."""
    plain = [solo(loaded, t, greedy(n)) for t, n in ((LONG, 30), (REPEAT, 20), (SHORT, 12))]
    for name, model in drafted.items():
        runner = ModelRunner(model, NO_CACHE)
        asks = [
            greedy(30, **DRAFT),
            greedy(20, **NGRAM),
            greedy(12),
        ]
        texts = (LONG, REPEAT, SHORT)
        outcomes = run(
            runner,
            *(make_sequence(model, ids_of(model, t), p) for t, p in zip(texts, asks, strict=True)),
        )
        for outcome, reference in zip(outcomes, plain, strict=True):
            same(outcome, reference)
        stats = runner.speculation
        if name == "self":  # its own guesses: right but for float rounding between passes
            assert stats.accepted >= 0.9 * stats.drafted and stats.accepted >= 15
        assert stats.drafted > 0


def test_a_draft_model_follows_a_sampled_row_from_its_seed(drafted):
    """Sampled rows keep the target's distribution: the same seed gives the same tokens with
    the draft model's guesses as without them."""
    model = drafted["self"]
    params = SamplingParams(temperature=0.1, top_p=0.9, seed=11, max_tokens=24, logit_bias=NO_EOS)
    plain = solo(model, LONG, params)
    runner = ModelRunner(model, NO_CACHE)
    (spec,) = run(runner, make_sequence(model, ids_of(model, LONG), replace(params, **DRAFT)))
    same(spec, plain)
    assert runner.speculation.accepted > 0


def test_asking_for_a_draft_model_where_there_is_none_fails_the_request(loaded):
    with pytest.raises(EngineError, match="no draft model"):
        make_drafter(SamplingParams(speculative="draft_model"), [1, 2])


def test_a_draft_model_of_another_vocabulary_is_refused(loaded, smollm_dir, tmp_path):
    odd = build_tiny_model(smollm_dir, tmp_path / "odd")
    vocab = json.loads((odd / "tokenizer.json").read_text())
    first = next(iter(vocab["model"]["vocab"]))
    vocab["model"]["vocab"]["renamed-token"] = vocab["model"]["vocab"].pop(first)
    (odd / "tokenizer.json").write_text(json.dumps(vocab))
    spec = replace(loaded.spec, model_id="tiny-odd", draft=ModelSpec("odd", str(odd)))
    with pytest.raises(EngineError, match="another vocabulary"):
        ModelPool(2**30).get(spec)


def test_a_costly_drafter_is_asked_only_for_tokens_that_should_pay():
    """A draft model's guesses cost forwards of their own: a row whose guesses keep failing
    is not asked at all (until its record drifts back), a reliable one for several tokens,
    fewer when more rows share the step (each position costs more)."""
    reliable, failing = TrackRecord(), TrackRecord()
    for _ in range(10):
        reliable.update(5, 4)  # four of five right: p = 0.8
        failing.update(5, 0)
    assert worth_asking(failing, 1) == 0
    assert worth_asking(reliable, 1) > worth_asking(reliable, 8) > 0
    for _ in range(200):
        failing.rest()
    assert worth_asking(failing, 1) > 0


def test_a_draft_model_reads_a_long_prompt_a_chunk_per_step(drafted):
    """A draft model catches up on a long prompt over several steps (no step of the batch
    waits for a whole prompt's read), proposing only once it has read it all."""
    model = drafted["self"]
    prompt = list(range(10, 10 + 2 * DRAFT_CHUNK + 5))
    drafter = ModelDrafter(model.draft, prompt, 4, model.vocab_size)
    assert drafter.propose(4) == [] and drafter.propose(4) == []
    assert len(drafter.propose(4)) == 4
    assert len(drafter.cached) == len(prompt) + 3  # the prompt, then the draft but its last
    drafter.extend([7, 8])  # the target kept none of it: the cache goes back to the prompt
    assert len(drafter.propose(2)) == 2
    assert drafter.cached[: len(prompt) + 2] == [*prompt, 7, 8][: len(prompt) + 2]


@pytest.mark.parametrize("draft_name", ["qwen3_5", "gemma3_text"])
def test_a_draft_model_with_recurrent_state_or_windows_goes_back_instead_of_reading_anew(
    smollm_dir, tmp_path_factory, draft_name
):
    """A hybrid target drafted for by a model whose layers cannot be cut (its own recurrent
    state; a sliding window past its size): after a rejection the draft model's saved state
    comes back instead of the whole sequence being read again, and the greedy tokens hold.
    The target drafting for itself keeps nearly every guess."""
    from tests.support.architectures import built

    target = built("qwen3_5", smollm_dir, tmp_path_factory)
    draft = ModelSpec(
        model_id=f"draft-{draft_name}",
        location=str(built(draft_name, smollm_dir, tmp_path_factory)),
    )
    pool = ModelPool(2**30)
    plain_model = pool.get(ModelSpec(model_id="hybrid", location=str(target)))
    model = pool.get(ModelSpec(model_id="hybrid-drafted", location=str(target), draft=draft))
    ids = ids_of(model, LONG)
    (plain,) = run(ModelRunner(plain_model, NO_CACHE), make_sequence(plain_model, ids, greedy(24)))
    sequence = make_sequence(model, ids, greedy(24, **DRAFT))
    runner = ModelRunner(model, NO_CACHE)
    (outcome,) = run(runner, sequence)
    same(outcome, plain)
    stats = runner.speculation
    assert stats.drafted > 0 and sequence.drafter.fresh_reads == 0
    if draft_name == "qwen3_5":
        assert stats.accepted >= 0.9 * stats.drafted
    else:
        assert stats.accepted < stats.drafted  # a random stranger's guesses: rejections


def test_a_row_that_stopped_drafting_resumes_once_its_free_drafts_would_be_right(loaded):
    """A free drafter's guesses that are not worth their place are still checked against the
    tokens the row then produces, so rows whose drafts failed at first draft again as soon as
    they would be right, rather than once their records have drifted back on their own. Eight
    rows (a position costs more on a CPU), each drafts wrong for its first 18 tokens."""
    plain = solo(loaded, LONG, greedy(60))
    script = plain.sequence.fed[1:] + [0] * 10
    runner = ModelRunner(loaded, NO_CACHE)
    rows = [with_oracle(loaded, LONG, greedy(60), script, set(range(18))) for _ in range(8)]
    outcomes = run(runner, *rows)
    for outcome in outcomes:
        same(outcome, plain)
    # 168 kept when the records only drifted back (REST a step): drafting resumed later.
    assert runner.speculation.accepted >= 200
