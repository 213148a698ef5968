"""One request's generation: prompt, sampling, constraints, stop tokens and stop strings.

The batch generator produces the tokens; a Sequence turns each into text events and decides
when the request is over.
"""

from __future__ import annotations

import time
from typing import Any

import mlx.core as mx

from inference.engine.detokenize import make_detokenizer
from inference.engine.drafting import make_drafter
from inference.engine.overflow import context_exceeded
from inference.engine.pool import LoadedModel
from inference.engine.sampling import make_processors, make_row_sampler, probe
from inference.engine.stops import StopStringMatcher
from inference.engine.types import (
    Candidate,
    Delta,
    Done,
    EngineError,
    ErrorKind,
    Event,
    GenerationJob,
    ImagePrompt,
    SampledToken,
    Started,
    TokenPrompt,
)


def prompt_ids(prompt: TokenPrompt, vocab_size: int) -> list[int]:
    bad = [t for t in prompt.ids if not 0 <= t < vocab_size]
    if bad:
        raise EngineError(
            ErrorKind.INVALID_REQUEST,
            f"prompt has token ids outside the vocabulary (size {vocab_size}): {bad[:5]}",
            prompt.param,
        )
    return list(prompt.ids)


def vision_model(loaded: LoadedModel) -> Any:
    from inference.engine.vision.model import VisionChatModel

    if not isinstance(loaded.model, VisionChatModel):
        message = f"model '{loaded.spec.model_id}' does not read images"
        raise EngineError(ErrorKind.INVALID_REQUEST, message, "messages")
    return loaded.model


def render_images(prompt: ImagePrompt, loaded: LoadedModel) -> tuple[list[int], mx.array]:
    """A prompt with images: its token ids and its input embeddings (engine/vision/)."""
    from inference.engine.vision.prompt import render_with_images

    return render_with_images(prompt, vision_model(loaded))


class Sequence:
    def __init__(self, job: GenerationJob, loaded: LoadedModel) -> None:
        self.job = job
        self.loaded = loaded
        # The LoRA adapter its rows add (its model id; None: the base's own). It decodes in its
        # base's batch, and its forwards tell the base's adapted linears so (lora.LoRASet).
        self.adapter = loaded.spec.model_id if loaded.base is not None else None
        # A prompt with images is read from its input embeddings (prefill), never cached.
        self.embeddings: mx.array | None = None
        self.truncated_messages = 0
        if isinstance(job.prompt, ImagePrompt):
            self.prompt, self.embeddings = render_images(job.prompt, loaded)
        else:
            self.prompt = prompt_ids(job.prompt, loaded.vocab_size)
            self.truncated_messages = job.prompt.truncated_messages
        self._check_length()
        params = job.params
        self._check_logit_bias(loaded.vocab_size)
        self.max_tokens = min(params.max_tokens or self.room, self.room)
        try:
            probe(params, loaded.vocab_size)
        except Exception as exc:
            raise EngineError(
                ErrorKind.INVALID_REQUEST, f"These sampling parameters cannot be applied: {exc}"
            ) from exc
        self.sampler = make_row_sampler(params)
        # None: one token per step
        self.drafter = make_drafter(
            params, self.prompt, loaded.draft, loaded.vocab_size, loaded.mtp, loaded.mtp_reason
        )
        self.processors = make_processors(params)
        if params.grammar:
            self.processors.append(self._constraint())
        self._stop_ids = job.stop_ids
        self._stops = StopStringMatcher((*job.stop_strings, *params.stop))
        self._detokenizer = make_detokenizer(loaded.tokenizer)
        self._pending_logprobs: list[SampledToken] = []
        self.fed: list[int] = []  # tokens generated and fed back, so in the KV cache
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.finished = False
        self.submitted_at = time.monotonic()
        self.first_token_at: float | None = None

    def _constraint(self) -> Any:
        from inference.engine.constraints import GrammarConstraint, compile_grammar

        matcher, loaded = self.job.matcher, self.loaded
        if matcher is None:  # a group's follower: the leader's compiled grammar did not travel
            from inference.engine.grammar_tokens import with_marker_tokens

            grammar = with_marker_tokens(self.job.params.grammar, loaded.marker_tokens)
            matcher = compile_grammar(loaded.ll_tokenizer, grammar)
        return GrammarConstraint(matcher, loaded.ll_tokenizer.vocab_size, len(self.prompt))

    @property
    def room(self) -> int:
        return self.loaded.context_length - len(self.prompt)

    def started(self) -> Started:
        echo = self.loaded.tokenizer.decode(self.prompt) if self.job.echo else None
        return Started(len(self.prompt), echo, self.cached_tokens, self.truncated_messages)

    def _check_length(self) -> None:
        param = self.job.prompt.param
        if not self.prompt:
            raise EngineError(ErrorKind.INVALID_REQUEST, "The prompt is empty.", param)
        if self.room <= 0:
            raise context_exceeded(len(self.prompt), self.loaded.context_length, param)

    def _check_logit_bias(self, vocab_size: int) -> None:
        bad = [t for t in self.job.params.logit_bias if not 0 <= t < vocab_size]
        if bad:
            raise EngineError(
                ErrorKind.INVALID_REQUEST,
                f"logit_bias names token ids outside the vocabulary (size {vocab_size}): {bad[:5]}",
                "logit_bias",
            )

    def on_token(self, token: int, logprobs: mx.array, last: bool) -> list[Event]:
        """One generated token; `last` when the generator reached max_tokens with it."""
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        self.completion_tokens += 1
        if token in self._stop_ids:
            return self._finish("stop")
        if self.job.params.logprobs:
            self._pending_logprobs.append(self._logprob(token, logprobs))
        self._detokenizer.add_token(token)
        text, hit = self._stops.feed(self._detokenizer.last_segment)
        events: list[Event] = self._delta(text)
        if hit:
            self.finished = True
            events.append(self._done("stop"))
        elif last:
            events.extend(self._finish("length"))
        return events

    def _logprob(self, token: int, logprobs: mx.array) -> SampledToken:
        text_of = self.loaded.token_text
        top: tuple[Candidate, ...] = ()
        k = self.job.params.top_logprobs
        if k:
            ids = mx.argpartition(-logprobs, k - 1)[:k]
            values = logprobs[ids].tolist()
            ranked = sorted(zip(ids.tolist(), values, strict=True), key=lambda p: -p[1])
            top = tuple(Candidate(*text_of(i), v) for i, v in ranked)
        return SampledToken(*text_of(token), logprobs[token].item(), top)

    def _delta(self, text: str) -> list[Event]:
        # Logprobs ride with the text they produced; a held-back token waits for its text.
        if not text:
            return []
        entries, self._pending_logprobs = tuple(self._pending_logprobs), []
        return [Delta(text, entries)]

    def _finish(self, reason: str) -> list[Event]:
        self.finished = True
        self._detokenizer.finalize()
        text, hit = self._stops.feed(self._detokenizer.last_segment)
        text += "" if hit else self._stops.flush()
        events = self._delta(text)
        if not events and self._pending_logprobs and not hit:
            events = [Delta("", tuple(self._pending_logprobs))]
        events.append(self._done("stop" if hit else reason))
        return events

    def _done(self, reason: str) -> Done:
        matched = self._stops.matched if reason == "stop" else None
        return Done(reason, len(self.prompt), self.completion_tokens, self.cached_tokens, matched)
