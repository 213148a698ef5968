"""One request's generation: prompt, sampling, constraints, stop tokens and stop strings."""

from __future__ import annotations

from collections.abc import Iterator

import mlx.core as mx
from mlx_lm.generate import generate_step

from inference.adapters.base import ChatTemplateMissing
from inference.engine.detokenize import make_detokenizer
from inference.engine.pool import LoadedModel
from inference.engine.sampling import make_processors, make_sampler
from inference.engine.stops import StopStringMatcher
from inference.engine.types import (
    ChatPrompt,
    Delta,
    Done,
    EngineError,
    ErrorKind,
    Event,
    GenerationJob,
    Started,
    TextPrompt,
    TokenLogprob,
    TopLogprob,
)


def render_prompt(job: GenerationJob, loaded: LoadedModel) -> list[int]:
    prompt, tokenizer = job.prompt, loaded.tokenizer
    if isinstance(prompt, ChatPrompt):
        try:
            return job.adapter.render_prompt(tokenizer, prompt.messages, prompt.tools)
        except ChatTemplateMissing as exc:
            raise EngineError(ErrorKind.INVALID_REQUEST, str(exc), "messages") from exc
    if isinstance(prompt, TextPrompt):
        return list(tokenizer.encode(prompt.text))
    bad = [t for t in prompt.ids if not 0 <= t < loaded.vocab_size]
    if bad:
        raise EngineError(
            ErrorKind.INVALID_REQUEST,
            f"prompt has token ids outside the vocabulary (size {loaded.vocab_size}): {bad[:5]}",
            "prompt",
        )
    return list(prompt.ids)


class Sequence:
    def __init__(self, job: GenerationJob, loaded: LoadedModel) -> None:
        self.job = job
        self.loaded = loaded
        prompt = render_prompt(job, loaded)
        self.prompt_tokens = len(prompt)
        room = loaded.context_length - self.prompt_tokens
        if room <= 0 or not prompt:
            raise EngineError(
                ErrorKind.CONTEXT_LENGTH_EXCEEDED if prompt else ErrorKind.INVALID_REQUEST,
                f"This model's maximum context length is {loaded.context_length} tokens; "
                f"the prompt takes {self.prompt_tokens}."
                if prompt
                else "The prompt is empty.",
                "messages" if isinstance(job.prompt, ChatPrompt) else "prompt",
            )
        params = job.params
        self._check_logit_bias(loaded.vocab_size)
        processors = make_processors(params)
        if params.grammar:
            from inference.engine.constraints import GrammarConstraint

            processors.append(GrammarConstraint(loaded.ll_tokenizer, params.grammar, len(prompt)))
        self.started = Started(
            self.prompt_tokens, loaded.tokenizer.decode(prompt) if job.echo else None
        )
        self._stop_ids = job.adapter.stop_token_ids(loaded.tokenizer)
        self._stops = StopStringMatcher((*job.adapter.stop_strings(), *params.stop))
        self._detokenizer = make_detokenizer(loaded.tokenizer)
        self._pending_logprobs: list[TokenLogprob] = []
        self.completion_tokens = 0
        self._steps: Iterator = generate_step(
            mx.array(prompt),
            loaded.model,
            max_tokens=min(params.max_tokens or room, room),
            sampler=make_sampler(params),
            logits_processors=processors,
        )

    def _check_logit_bias(self, vocab_size: int) -> None:
        bad = [t for t in self.job.params.logit_bias if not 0 <= t < vocab_size]
        if bad:
            raise EngineError(
                ErrorKind.INVALID_REQUEST,
                f"logit_bias names token ids outside the vocabulary (size {vocab_size}): {bad[:5]}",
                "logit_bias",
            )

    def advance(self) -> list[Event]:
        """Generates one token; returns the events it produced (the last may be Done)."""
        try:
            token, logprobs = next(self._steps)
        except StopIteration:
            return self._finish("length")
        token = int(token)
        self.completion_tokens += 1
        if token in self._stop_ids:
            return self._finish("stop")
        if self.job.params.logprobs:
            self._pending_logprobs.append(self._logprob(token, logprobs))
        self._detokenizer.add_token(token)
        text, hit = self._stops.feed(self._detokenizer.last_segment)
        events: list[Event] = self._delta(text)
        if hit:
            events.append(self._done("stop"))
        return events

    def _logprob(self, token: int, logprobs: mx.array) -> TokenLogprob:
        text_of = self.loaded.token_text
        top: tuple[TopLogprob, ...] = ()
        k = self.job.params.top_logprobs
        if k:
            ids = mx.argpartition(-logprobs, k - 1)[:k]
            values = logprobs[ids].tolist()
            ranked = sorted(zip(ids.tolist(), values, strict=True), key=lambda p: -p[1])
            top = tuple(TopLogprob(*text_of(i), v) for i, v in ranked)
        return TokenLogprob(*text_of(token), logprobs[token].item(), top)

    def _delta(self, text: str) -> list[Event]:
        # Logprobs ride with the text they produced; a held-back token waits for its text.
        if not text:
            return []
        entries, self._pending_logprobs = tuple(self._pending_logprobs), []
        return [Delta(text, entries)]

    def _finish(self, reason: str) -> list[Event]:
        self._detokenizer.finalize()
        text, hit = self._stops.feed(self._detokenizer.last_segment)
        text += "" if hit else self._stops.flush()
        events = self._delta(text)
        if not events and self._pending_logprobs and not hit:
            events = [Delta("", tuple(self._pending_logprobs))]
        events.append(self._done("stop" if hit else reason))
        return events

    def close(self) -> None:
        """Ends generation here, on the engine thread: MLX's stream context must not be torn
        down by the garbage collector on some other thread."""
        self._steps.close()

    def _done(self, reason: str) -> Done:
        return Done(reason, self.prompt_tokens, self.completion_tokens)
