"""POST /v1/completions (legacy): raw prompts, one choice per prompt and n."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from inference.engine.types import (
    Delta,
    Failed,
    JobRequest,
    Prompt,
    SampledToken,
    TextPrompt,
    TokenPrompt,
)
from inference.protocol.openai.common import LegacyLogprobs
from inference.protocol.openai.completions import Completion, CompletionChoice, CompletionRequest
from inference.protocol.openai.errors import error_body
from inference.serving.context import RequestContext
from inference.serving.errors import api_error
from inference.serving.generation import Choice, Generation
from inference.serving.resolve import resolve_model
from inference.serving.sampling import per_choice, sampling_params
from inference.serving.sse import DONE, EventStream, chunk_writer, sse_event


@dataclass
class CompletionRun:
    request: CompletionRequest
    prompts: list[Prompt]
    generation: Generation
    # Where each choice's next token starts in its text (echo included), for text_offset.
    offsets: dict[int, int] = field(default_factory=dict)

    def prompt_of(self, choice: Choice) -> Prompt:
        return self.prompts[choice.index // self.request.n]

    def echo_text(self, choice: Choice) -> str:
        if not self.request.echo:
            return ""
        prompt = self.prompt_of(choice)
        return prompt.text if isinstance(prompt, TextPrompt) else choice.started.prompt_text or ""

    def logprobs(self, choice: Choice, entries: tuple[SampledToken, ...] | list[SampledToken]):
        if self.request.logprobs is None:
            return None
        offset = self.offsets.setdefault(choice.index, len(self.echo_text(choice)))
        offsets = []
        for entry in entries:
            offsets.append(offset)
            offset += len(entry.token)
        self.offsets[choice.index] = offset
        return LegacyLogprobs(
            tokens=[e.token for e in entries],
            token_logprobs=[e.logprob for e in entries],
            top_logprobs=[{t.token: t.logprob for t in e.top} for e in entries],
            text_offset=offsets,
        )


async def answer_completion(
    request: CompletionRequest, ctx: RequestContext
) -> Completion | EventStream:
    run = await start_completion(request, ctx)
    if request.stream:
        return EventStream(stream_completion(run))
    return await complete(run)


async def start_completion(request: CompletionRequest, ctx: RequestContext) -> CompletionRun:
    resolved = await resolve_model(request.model, ctx.caller)
    params = sampling_params(
        request,
        resolved.entry,
        # OpenAI's legacy default of 16 tokens yields to the catalog's default and limit.
        max_tokens=request.max_tokens if "max_tokens" in request.model_fields_set else None,
        default_max_tokens=request.max_tokens,
        logprobs=request.logprobs is not None,
        top_logprobs=request.logprobs or 0,
    )
    prompts: list[Prompt] = [
        TextPrompt(p) if isinstance(p, str) else TokenPrompt(tuple(p)) for p in request.prompts()
    ]
    jobs = [
        JobRequest(resolved.spec, resolved.adapter, prompt, choice_params, echo=request.echo)
        for prompt in prompts
        for choice_params in per_choice(params, request.n)
    ]
    generation = await Generation.start(ctx, jobs, "cmpl", request.n)
    return CompletionRun(request, prompts, generation)


async def complete(run: CompletionRun) -> Completion:
    await run.generation.finish()
    choices = [
        CompletionChoice(
            index=choice.index,
            text=run.echo_text(choice) + choice.text,
            logprobs=run.logprobs(choice, choice.logprobs),
            finish_reason=choice.done.finish_reason,
        )
        for choice in run.generation.choices.values()
    ]
    return Completion(
        **run.generation.envelope(run.request.model), choices=choices, usage=run.generation.usage()
    )


async def stream_completion(run: CompletionRun) -> AsyncIterator[str]:
    request, generation = run.request, run.generation
    chunk = chunk_writer(Completion, generation.envelope(request.model), request.include_usage())

    def text_choice(choice: Choice, text: str, logprobs=None, finish=None) -> CompletionChoice:
        return CompletionChoice(
            index=choice.index, text=text, logprobs=logprobs, finish_reason=finish
        )

    for choice in generation.choices.values():
        if echo := run.echo_text(choice):
            yield chunk([text_choice(choice, echo)])
    async for choice, event in generation.events():
        if isinstance(event, Failed):
            yield sse_event(error_body(api_error(event.error)))
            break
        if isinstance(event, Delta):
            logprobs = run.logprobs(choice, event.logprobs)
            yield chunk([text_choice(choice, event.text, logprobs)])
        else:
            yield chunk([text_choice(choice, "", finish=event.finish_reason)])
    else:
        if request.include_usage():
            yield chunk([], run.generation.usage())
    yield DONE
