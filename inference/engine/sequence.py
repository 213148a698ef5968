"""One request's generation: prompt, sampling, constraints, stop tokens and stop strings.

The batch generator produces the tokens; a Sequence turns each into text events and decides
when the request is over.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import mlx.core as mx
from jinja2 import TemplateError

from inference.adapters.base import ChatTemplateMissing
from inference.engine.detokenize import make_detokenizer
from inference.engine.overflow import reply_room, truncate_middle
from inference.engine.pool import LoadedModel
from inference.engine.sampling import make_processors, make_row_sampler, probe
from inference.engine.stops import StopStringMatcher
from inference.engine.types import (
    Candidate,
    ChatPrompt,
    Delta,
    Done,
    EngineError,
    ErrorKind,
    Event,
    GenerationJob,
    SampledToken,
    Started,
    TextPrompt,
)


def render_prompt(job: GenerationJob, loaded: LoadedModel) -> list[int]:
    prompt, tokenizer = job.prompt, loaded.tokenizer
    if isinstance(prompt, ChatPrompt) and prompt.images:  # counted: no vision tower run
        from inference.engine.vision.prompt import processed

        return processed(job.adapter, tokenizer, _vision_model(loaded), prompt)[0]
    if isinstance(prompt, ChatPrompt):
        return _render_chat(job, loaded, prompt)
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


def _render_chat(job: GenerationJob, loaded: LoadedModel, prompt: ChatPrompt) -> list[int]:
    try:
        return job.adapter.render_prompt(
            loaded.tokenizer, prompt.messages, prompt.tools, prompt.template_kwargs, prompt.prefill
        )
    except ChatTemplateMissing as exc:
        raise EngineError(ErrorKind.INVALID_REQUEST, str(exc), "messages") from exc
    except TemplateError as exc:  # the template refused these messages (or kwargs)
        message = f"The model's chat template could not render this request: {exc}"
        raise EngineError(ErrorKind.INVALID_REQUEST, message, "messages") from exc


def fit_prompt(job: GenerationJob, loaded: LoadedModel) -> tuple[list[int], int]:
    """The prompt's tokens under the job's overflow policy, and how many messages it left out
    (engine/overflow.py). Prompts with images are never truncated: their images would have to
    follow their messages out."""
    tokens = render_prompt(job, loaded)
    prompt = job.prompt
    if not isinstance(prompt, ChatPrompt) or prompt.overflow != "truncate_middle":
        return tokens, 0
    if prompt.images:
        return tokens, 0
    context = loaded.context_length
    return truncate_middle(
        prompt.messages,
        tokens,
        lambda messages: _render_chat(job, loaded, replace(prompt, messages=messages)),
        context,
        reply_room(context, job.params.max_tokens),
    )


def _vision_model(loaded: LoadedModel) -> Any:
    from inference.engine.vision.model import VisionChatModel

    if not isinstance(loaded.model, VisionChatModel):
        message = f"model '{loaded.spec.model_id}' does not read images"
        raise EngineError(ErrorKind.INVALID_REQUEST, message, "messages")
    return loaded.model


def render_images(job: GenerationJob, loaded: LoadedModel) -> tuple[list[int], mx.array]:
    """A chat prompt with images: its token ids and its input embeddings (engine/vision/)."""
    from inference.engine.vision.prompt import render_with_images

    model = _vision_model(loaded)
    return render_with_images(job.adapter, loaded.tokenizer, model, job.prompt)


def context_exceeded(prompt_tokens: int, context_length: int, param: str) -> EngineError:
    """OpenAI's wording; the numbers travel too, for the other dialects' own."""
    what = "messages" if param == "messages" else "prompt"
    return EngineError(
        ErrorKind.CONTEXT_LENGTH_EXCEEDED,
        f"This model's maximum context length is {context_length} tokens. However, your {what} "
        f"resulted in {prompt_tokens} tokens. Please reduce the length of the {what}.",
        param,
        prompt_tokens=prompt_tokens,
        context_length=context_length,
    )


class Sequence:
    def __init__(self, job: GenerationJob, loaded: LoadedModel) -> None:
        self.job = job
        self.loaded = loaded
        # A prompt with images is read from its input embeddings (prefill), never cached.
        self.embeddings: mx.array | None = None
        self.truncated_messages = 0
        if isinstance(job.prompt, ChatPrompt) and job.prompt.images:
            self.prompt, self.embeddings = render_images(job, loaded)
        else:
            self.prompt, self.truncated_messages = fit_prompt(job, loaded)
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
        self.processors = make_processors(params)
        if params.grammar:
            from inference.engine.constraints import GrammarConstraint
            from inference.engine.grammar_tokens import with_marker_tokens

            grammar = with_marker_tokens(params.grammar, loaded.marker_tokens)
            constraint = GrammarConstraint(loaded.ll_tokenizer, grammar, len(self.prompt))
            self.processors.append(constraint)
        self._stop_ids = job.adapter.stop_token_ids(loaded.tokenizer)
        self._stops = StopStringMatcher((*job.adapter.stop_strings(), *params.stop))
        self._detokenizer = make_detokenizer(loaded.tokenizer)
        self._pending_logprobs: list[SampledToken] = []
        self.fed: list[int] = []  # tokens generated and fed back, so in the KV cache
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.finished = False
        self.submitted_at = time.monotonic()
        self.first_token_at: float | None = None

    @property
    def room(self) -> int:
        return self.loaded.context_length - len(self.prompt)

    def started(self) -> Started:
        echo = self.loaded.tokenizer.decode(self.prompt) if self.job.echo else None
        return Started(len(self.prompt), echo, self.cached_tokens, self.truncated_messages)

    def _check_length(self) -> None:
        chat = isinstance(self.job.prompt, ChatPrompt)
        param = "messages" if chat else "prompt"
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
