"""ModelRunner driven directly, step by step, on a tiny random model: no engine thread, no
HTTP. A sequence goes waiting -> prefill -> decode -> Done; greedy tokens are mlx-lm's own,
alone or batched; cancel frees the slot; copies of one prompt are read once; the prefix cache
serves a repeated prompt."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from mlx_lm import stream_generate
from mlx_lm.sample_utils import make_sampler

from inference.engine import decode
from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.sequence import Sequence
from inference.engine.types import Delta, Done, Event, ModelSpec, SamplingParams
from tests.engine.jobs import EOS, NO_EOS, greedy, make_sequence
from tests.support.helpers import build_tiny_model

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

NO_CACHE = EngineConfig(prompt_cache_bytes=0)
SHORT = "Hello there, how are you today?"
LONG = " ".join(f"item {i}," for i in range(60))  # ~180 tokens: read over several steps


@pytest.fixture(scope="module")
def loaded(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    """The tiny random model with an output head of its own: its greedy tokens change from one
    to the next (tied to the embeddings, it repeats one word), so a row that got another's
    state, or the wrong positions, shows."""
    path = tmp_path_factory.mktemp("runner") / "tiny-untied"
    build_tiny_model(smollm_dir, path, tie_word_embeddings=False)
    return ModelPool(2**30).get(ModelSpec(model_id="tiny-untied", location=str(path)))


def ids_of(loaded: LoadedModel, text: str) -> list[int]:
    return list(loaded.tokenizer.encode(text))


@dataclass
class Outcome:
    """What one sequence produced: its text, the tokens it fed back and its Done."""

    sequence: Sequence
    events: list[Event] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, Delta))

    @property
    def done(self) -> Done:
        last = self.events[-1]
        assert isinstance(last, Done), self.events
        return last

    @property
    def tokens(self) -> list[int]:
        """Generated tokens fed back, all but the last (the first fed is the prompt's last; a
        pipelined batch may feed a row's last too, to a step it queued before the row ended)."""
        return self.sequence.fed[1 : self.done.completion_tokens]


def run(runner: ModelRunner, *sequences: Sequence) -> list[Outcome]:
    """Adds the sequences and steps the runner until every one is done."""
    for sequence in sequences:
        runner.add(sequence)
    return drain(runner, *sequences)


def drain(runner: ModelRunner, *sequences: Sequence, max_steps: int = 200) -> list[Outcome]:
    """Steps the runner until every one of the sequences (already added) is done."""
    outcomes = {id(s): Outcome(s) for s in sequences}
    for _ in range(max_steps):
        if all(s.finished for s in sequences):
            break
        for sequence, events in runner.step():
            if id(sequence) in outcomes:  # others in the batch are some other test's concern
                outcomes[id(sequence)].events.extend(events)
    assert all(s.finished for s in sequences), "not done within max_steps"
    return [outcomes[id(s)] for s in sequences]


def alone(loaded: LoadedModel, ids: list[int], max_tokens: int) -> Outcome:
    runner = ModelRunner(loaded, NO_CACHE)
    return run(runner, make_sequence(loaded, ids, greedy(max_tokens)))[0]


def mlx_lm_greedy(
    loaded: LoadedModel, ids: list[int], max_tokens: int, ban_eos: bool = True
) -> list[int]:
    """The tokens of mlx-lm's own generation loop, greedy, with the same end token banned
    (unless not `ban_eos`: the pipelined runs below ban nothing)."""
    ban = [lambda _, logits: logits.at[:, EOS].add(NO_EOS[EOS])] if ban_eos else None
    return [
        r.token
        for r in stream_generate(
            loaded.model,
            loaded.tokenizer,
            ids,
            max_tokens=max_tokens,
            sampler=make_sampler(0.0),
            logits_processors=ban,
        )
    ]


def test_a_sequence_goes_waiting_prefill_decode_done(loaded):
    runner = ModelRunner(loaded, NO_CACHE)
    ids = ids_of(loaded, LONG)
    sequence = make_sequence(loaded, ids, greedy(5))
    active = loaded.active
    runner.add(sequence)
    assert runner.busy and runner.waiting == 1 and runner.sequences == [sequence]
    assert loaded.active == active + 1
    # The first step reads a small measured chunk (64 tokens) of the ~180: no token yet.
    assert runner.step() == []
    assert runner.waiting == 0 and runner.sequences == [sequence]
    assert sequence.completion_tokens == 0 and sequence.fed == []
    steps, events = 1, []
    while not sequence.finished:
        produced = runner.step()
        steps += 1
        events += [e for s, batch in produced if s is sequence for e in batch]
        assert steps < 50
    done = events[-1]
    assert isinstance(done, Done)
    assert (done.finish_reason, done.prompt_tokens, done.completion_tokens) == (
        "length",
        len(ids),
        5,
    )
    assert done.cached_tokens == 0
    assert len(sequence.fed) == 5  # the prompt's last token, then the first four generated
    assert not runner.busy and runner.sequences == [] and runner.waiting == 0
    assert loaded.active == active


@pytest.mark.parametrize("text", [SHORT, LONG])
def test_greedy_tokens_are_mlx_lm_generate_s(loaded, text):
    ids = ids_of(loaded, text)
    ours = alone(loaded, ids, 12)
    tokens = mlx_lm_greedy(loaded, ids, 12)
    assert ours.tokens == tokens[:-1]
    # The text of all twelve, the last included, leading space kept (engine/detokenize.py:
    # mlx-lm's own streaming text drops it).
    assert ours.text == loaded.tokenizer.decode(tokens)
    assert ours.done.completion_tokens == 12


def test_two_sequences_batched_give_each_one_s_tokens(loaded):
    first, second = ids_of(loaded, SHORT), ids_of(loaded, LONG)
    expected = [alone(loaded, first, 10), alone(loaded, second, 14)]
    together = run(
        ModelRunner(loaded, NO_CACHE),
        make_sequence(loaded, first, greedy(10)),
        make_sequence(loaded, second, greedy(14)),
    )
    for got, want in zip(together, expected, strict=True):
        assert (got.tokens, got.text) == (want.tokens, want.text)
        assert got.done.completion_tokens == want.done.completion_tokens


def test_a_sequence_joining_a_running_batch_gets_its_own_tokens(loaded):
    first, second = ids_of(loaded, LONG), ids_of(loaded, SHORT)
    expected = [alone(loaded, first, 12), alone(loaded, second, 6)]
    runner = ModelRunner(loaded, NO_CACHE)
    early = make_sequence(loaded, first, greedy(12))
    runner.add(early)
    while early.completion_tokens < 4:  # decoding before the other arrives
        runner.step()
    late = make_sequence(loaded, second, greedy(6))
    run(runner, late)
    while not early.finished:
        runner.step()
    assert early.fed[1:12] == expected[0].tokens
    assert late.fed[1:6] == expected[1].tokens


def test_cancel_frees_the_slot_for_the_next_in_line(loaded):
    runner = ModelRunner(loaded, replace(NO_CACHE, max_batch=1))
    ids = ids_of(loaded, SHORT)
    first = make_sequence(loaded, ids, greedy(100))
    second = make_sequence(loaded, ids_of(loaded, LONG), greedy(3))
    active = loaded.active
    runner.add(first)
    runner.add(second)
    for _ in range(3):
        runner.step()
    assert first.completion_tokens > 0 and runner.waiting == 1  # one slot, taken
    runner.cancel([first])
    assert first not in runner.sequences and runner.sequences == [second]
    assert loaded.active == active + 1
    runner.step()
    assert runner.waiting == 0  # the freed slot went to the sequence waiting for it
    produced = []
    while not second.finished:
        produced += runner.step()
        assert len(produced) < 50
    assert {id(s) for s, _ in produced} == {id(second)}  # nothing more for the cancelled one
    assert second.completion_tokens == 3 and not runner.busy
    assert loaded.active == active


def test_cancel_drops_a_prompt_being_read_and_one_still_waiting(loaded):
    runner = ModelRunner(loaded, replace(NO_CACHE, max_batch=1))
    reading = make_sequence(loaded, ids_of(loaded, LONG), greedy(3))
    waiting = make_sequence(loaded, ids_of(loaded, SHORT), greedy(3))
    active = loaded.active
    runner.add(reading)
    runner.add(waiting)
    assert runner.step() == []  # the long prompt is partly read
    assert runner.waiting == 1 and reading.fed == []
    runner.cancel([reading, waiting])
    assert runner.sequences == [] and not runner.busy
    assert loaded.active == active
    assert runner.step() == []


def test_max_tokens_ends_with_length(loaded):
    sequence = make_sequence(loaded, ids_of(loaded, SHORT), greedy(3))
    (outcome,) = run(ModelRunner(loaded, NO_CACHE), sequence)
    assert outcome.done.finish_reason == "length"
    assert outcome.done.completion_tokens == 3
    assert len([e for e in outcome.events if isinstance(e, Done)]) == 1


def test_without_max_tokens_the_context_s_room_ends_it(loaded):
    ids = ids_of(loaded, SHORT)
    cramped = replace(loaded, context_length=len(ids) + 4)
    sequence = make_sequence(cramped, ids, greedy(None))
    (outcome,) = run(ModelRunner(cramped, NO_CACHE), sequence)
    assert (outcome.done.finish_reason, outcome.done.completion_tokens) == ("length", 4)


def spy_on_prompt_reading(runner: ModelRunner) -> list[int]:
    """The prompt tokens each of the runner's prefill passes computes (the pass still runs)."""
    computed: list[int] = []
    prefill = runner._prefill
    step = prefill.step

    def counted(budget: int) -> int:
        computed.append(step(budget))
        return computed[-1]

    prefill.step = counted  # type: ignore[method-assign]
    return computed


def test_copies_of_one_prompt_are_read_once(loaded):
    ids = ids_of(loaded, LONG)
    expected = alone(loaded, ids, 6)
    runner = ModelRunner(loaded, NO_CACHE)
    computed = spy_on_prompt_reading(runner)
    copies = [make_sequence(loaded, ids, greedy(6), group="req-1") for _ in range(4)]
    for sequence in copies:
        runner.add(sequence)
    assert runner.waiting == 4 and runner.sequences == copies
    # The first is read; the others wait for it, their whole prompt but the last token cached.
    assert [s.cached_tokens for s in copies] == [0] + [len(ids) - 1] * 3
    outcomes = drain(runner, *copies)
    assert sum(computed) == len(ids) - 1  # the prompt but its last token, once for all four
    for outcome in outcomes:
        assert (outcome.tokens, outcome.text) == (expected.tokens, expected.text)
    assert [o.done.cached_tokens for o in outcomes] == [0] + [len(ids) - 1] * 3


def test_the_same_prompt_in_separate_requests_is_read_for_each(loaded):
    ids = ids_of(loaded, SHORT)
    runner = ModelRunner(loaded, NO_CACHE)
    computed = spy_on_prompt_reading(runner)
    run(runner, *(make_sequence(loaded, ids, greedy(2), group=f"req-{i}") for i in range(3)))
    assert sum(computed) == 3 * (len(ids) - 1)


def test_a_cancelled_leader_s_copies_still_run(loaded):
    ids = ids_of(loaded, LONG)
    expected = alone(loaded, ids, 4)
    runner = ModelRunner(loaded, NO_CACHE)
    leader, *copies = [make_sequence(loaded, ids, greedy(4), group="req-2") for _ in range(3)]
    for sequence in (leader, *copies):
        runner.add(sequence)
    assert runner.step() == []  # the leader's prompt is partly read
    runner.cancel([leader])
    assert runner.sequences == copies
    for outcome in drain(runner, *copies):
        assert outcome.tokens == expected.tokens


def test_the_prefix_cache_serves_a_repeated_prompt(loaded):
    runner = ModelRunner(loaded, EngineConfig())
    ids = ids_of(loaded, LONG)
    (first,) = run(runner, make_sequence(loaded, ids, greedy(6)))
    assert first.done.cached_tokens == 0
    again = make_sequence(loaded, ids, greedy(6))
    (second,) = run(runner, again)
    runner.step()  # as the engine's next turn does: the answers' KV is kept once they are out
    assert runner.prefix_cache_bytes > 0
    # All but the last token, which generation must feed itself.
    assert second.done.cached_tokens == len(ids) - 1
    assert (second.tokens, second.text) == (first.tokens, first.text)


def test_a_follow_up_turn_starts_from_the_cached_conversation(loaded):
    runner = ModelRunner(loaded, EngineConfig())
    ids = ids_of(loaded, SHORT)
    (first,) = run(runner, make_sequence(loaded, ids, greedy(5)))
    # The cache holds the prompt and every generated token fed back (all but the last).
    follow_up = ids + first.tokens + ids_of(loaded, " And then?")
    (second,) = run(runner, make_sequence(loaded, follow_up, greedy(5)))
    assert second.done.cached_tokens == len(ids) + len(first.tokens)
    assert second.tokens == alone(loaded, follow_up, 5).tokens


# Pipelined decode (decode.PIPELINE): rows without processors, drafts or log probabilities have
# each step queued before the one before it is read. The runs below have no banned token (a
# logit_bias is a processor) and end at max_tokens or at a stop id of their own.


def plain(max_tokens: int, **extra: object) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, **extra)


def plain_sequence(loaded: LoadedModel, ids: list[int], params: SamplingParams, stops=()):
    return make_sequence(loaded, ids, params, stop_ids=frozenset(stops))


def texts(outcomes: list[Outcome]) -> list[tuple[str, int, str]]:
    return [(o.text, o.done.completion_tokens, o.done.finish_reason) for o in outcomes]


def scenario(loaded: LoadedModel, runner: ModelRunner) -> list[Outcome]:
    """Rows of different lengths, one joining late, one ending at a stop id mid-batch, one
    that needs to see its tokens (a repetition penalty) joining a pipelined batch."""
    first, second = ids_of(loaded, LONG), ids_of(loaded, SHORT)
    stop = mlx_lm_plain(loaded, second, 5)[3]  # its fourth token ends it
    early = [
        plain_sequence(loaded, first, plain(14)),
        plain_sequence(loaded, second, plain(9), stops=[stop]),
    ]
    late = [
        plain_sequence(loaded, second, plain(6)),
        make_sequence(loaded, first, greedy(5, repetition_penalty=1.2)),
    ]
    outcomes = {id(s): Outcome(s) for s in (*early, *late)}
    for sequence in early:
        runner.add(sequence)
    waiting = list(late)
    for _ in range(100):
        while waiting and early[0].completion_tokens >= 3:
            runner.add(waiting.pop(0))
        for sequence, events in runner.step():
            outcomes[id(sequence)].events.extend(events)
        if all(s.finished for s in (*early, *late)):
            return list(outcomes.values())
    raise AssertionError("not done within 100 steps")


def mlx_lm_plain(loaded: LoadedModel, ids: list[int], max_tokens: int) -> list[int]:
    return mlx_lm_greedy(loaded, ids, max_tokens, ban_eos=False)


def test_plain_greedy_tokens_are_mlx_lm_s_pipelined(loaded):
    ids = ids_of(loaded, LONG)
    runner = ModelRunner(loaded, NO_CACHE)
    sequence = plain_sequence(loaded, ids, plain(12))
    runner.add(sequence)
    queued = []
    while not sequence.finished:
        runner.step()
        queued.append(runner._decode._ahead is not None)
    assert any(queued)  # the pipelined path ran
    tokens = mlx_lm_plain(loaded, ids, 12)
    assert sequence.fed[1:] == tokens[:-1]  # the last is not fed: its step was never queued
    assert not runner.busy and runner._decode._ahead is None


def test_pipelined_and_unpipelined_batches_answer_alike(loaded, monkeypatch):
    pipelined = scenario(loaded, ModelRunner(loaded, NO_CACHE))
    monkeypatch.setattr(decode, "PIPELINE", False)
    stepwise = scenario(loaded, ModelRunner(loaded, NO_CACHE))
    assert texts(pipelined) == texts(stepwise)
    assert [o.done.finish_reason for o in pipelined] == ["length", "stop", "length", "length"]


def test_seeded_sampling_is_the_same_pipelined(loaded, monkeypatch):
    ids = ids_of(loaded, SHORT)
    params = SamplingParams(temperature=0.9, top_p=0.95, max_tokens=16, seed=7)
    answers = []
    for on in (True, False):
        monkeypatch.setattr(decode, "PIPELINE", on)
        runner = ModelRunner(loaded, NO_CACHE)
        together = [plain_sequence(loaded, ids, params), plain_sequence(loaded, ids, plain(8))]
        answers.append(texts(run(runner, *together)))
    assert answers[0] == answers[1]


def test_cancelling_a_pipelined_row_leaves_the_others_tokens(loaded):
    ids = ids_of(loaded, LONG)
    expected = mlx_lm_plain(loaded, ids, 10)
    runner = ModelRunner(loaded, NO_CACHE)
    kept, cancelled = plain_sequence(loaded, ids, plain(10)), plain_sequence(loaded, ids, plain(50))
    for sequence in (cancelled, kept):  # the cancelled row first: the kept one moves up
        runner.add(sequence)
    while kept.completion_tokens < 4:
        runner.step()
    runner.cancel([cancelled])
    drain(runner, kept)
    assert kept.fed[1:] == expected[:-1]


def test_a_pipelined_answer_ended_by_a_stop_id_is_cached_whole(loaded):
    """The step after the stop id was queued before the stop was seen: the stop id is in the
    KV cache, and in the tokens the prefix cache files it under."""
    runner = ModelRunner(loaded, EngineConfig())
    ids = ids_of(loaded, SHORT)
    stop = mlx_lm_plain(loaded, ids, 6)[4]
    (first,) = run(runner, plain_sequence(loaded, ids, plain(20), stops=[stop]))
    assert first.done.finish_reason == "stop"
    answer = first.sequence.fed[1:]
    assert answer[-1] == stop
    follow_up = ids + answer + ids_of(loaded, " And then?")
    (second,) = run(runner, plain_sequence(loaded, follow_up, plain(5)))
    assert second.done.cached_tokens == len(ids) + len(answer)
    assert second.sequence.fed[1:] == mlx_lm_plain(loaded, follow_up, 5)[:-1]
