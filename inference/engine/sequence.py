"""One request's generation: prompt, sampling, stop tokens and stop strings."""

from __future__ import annotations

from collections.abc import Iterator

import mlx.core as mx
from mlx_lm.generate import generate_step

from inference.adapters.base import ChatTemplateMissing
from inference.engine.pool import LoadedModel
from inference.engine.sampling import make_processors, make_sampler
from inference.engine.stops import StopStringMatcher
from inference.engine.types import Delta, Done, EngineError, ErrorKind, Event, GenerationJob


class Sequence:
    def __init__(self, job: GenerationJob, loaded: LoadedModel) -> None:
        self.job = job
        self.loaded = loaded
        tokenizer = loaded.tokenizer
        try:
            prompt = job.adapter.render_prompt(tokenizer, job.messages)
        except ChatTemplateMissing as exc:
            raise EngineError(ErrorKind.INVALID_REQUEST, str(exc), "messages") from exc
        self.prompt_tokens = len(prompt)
        room = loaded.context_length - self.prompt_tokens
        if room <= 0:
            raise EngineError(
                ErrorKind.CONTEXT_LENGTH_EXCEEDED,
                f"This model's maximum context length is {loaded.context_length} tokens; "
                f"the messages take {self.prompt_tokens}.",
                "messages",
            )
        self._check_logit_bias(job, len(tokenizer.get_vocab()))
        params = job.params
        self._stop_ids = job.adapter.stop_token_ids(tokenizer)
        self._stops = StopStringMatcher((*job.adapter.stop_strings(), *params.stop))
        self._detokenizer = tokenizer.detokenizer
        self.completion_tokens = 0
        self._steps: Iterator = generate_step(
            mx.array(prompt),
            loaded.model,
            max_tokens=min(params.max_tokens or room, room),
            sampler=make_sampler(params),
            logits_processors=make_processors(params),
        )

    @staticmethod
    def _check_logit_bias(job: GenerationJob, vocab_size: int) -> None:
        bad = [t for t in job.params.logit_bias if not 0 <= t < vocab_size]
        if bad:
            raise EngineError(
                ErrorKind.INVALID_REQUEST,
                f"logit_bias names token ids outside the vocabulary (size {vocab_size}): {bad[:5]}",
                "logit_bias",
            )

    def advance(self) -> list[Event]:
        """Generates one token; returns the events it produced (the last may be Done)."""
        try:
            token, _ = next(self._steps)
        except StopIteration:
            return self._finish("length")
        token = int(token)
        self.completion_tokens += 1
        if token in self._stop_ids:
            return self._finish("stop")
        self._detokenizer.add_token(token)
        text, hit = self._stops.feed(self._detokenizer.last_segment)
        events: list[Event] = [Delta(text)] if text else []
        if hit:
            events.append(self._done("stop"))
        return events

    def _finish(self, reason: str) -> list[Event]:
        self._detokenizer.finalize()
        text, hit = self._stops.feed(self._detokenizer.last_segment)
        text += "" if hit else self._stops.flush()
        events: list[Event] = [Delta(text)] if text else []
        events.append(self._done("stop" if hit else reason))
        return events

    def _done(self, reason: str) -> Done:
        return Done(reason, self.prompt_tokens, self.completion_tokens)
