"""POST /v1/completions (legacy): raw prompts, one choice per prompt and n."""

from __future__ import annotations

from inference.engine.types import Delta, Done, SampledToken, TokenPrompt
from inference.protocol.openai.common import LegacyLogprobs
from inference.protocol.openai.completions import Completion, CompletionChoice, CompletionRequest
from inference.serving.context import RequestContext
from inference.serving.generation import Choice
from inference.serving.openai.envelopes import chunk_writer, envelope
from inference.serving.openai.sampling import sampling_ask
from inference.serving.openai.usage import openai_usage
from inference.serving.plan import Plan
from inference.serving.prompts import Asked, TextPrompt
from inference.serving.resolve import ResolvedModel
from inference.serving.sse import Wire
from inference.serving.writer import ReplyWriter, Run


async def plan_completion(
    request: CompletionRequest, resolved: ResolvedModel, ctx: RequestContext
) -> Plan:
    """The plan builder: prompts as they were sent, no template."""
    prompts = tuple(
        TextPrompt(p) if isinstance(p, str) else TokenPrompt(tuple(p)) for p in request.prompts()
    )
    sampling = sampling_ask(
        request,
        # OpenAI's legacy default of 16 tokens yields to the catalog's default and limit.
        max_tokens=request.max_tokens if "max_tokens" in request.model_fields_set else None,
        default_max_tokens=request.max_tokens,
        logprobs=request.logprobs is not None,
        top_logprobs=request.logprobs or 0,
    )
    return Plan(sampling=sampling, raw_prompts=prompts, n=request.n, echo=request.echo)


class CompletionWriter(ReplyWriter):
    """The reply writer: echoed prompts, text chunks, finish chunks, optional usage; or the
    whole completion."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.request: CompletionRequest = run.body  # type: ignore[assignment]
        self.chunk = chunk_writer(Completion, run, self.request.include_usage())
        # Where each choice's next token starts in its text (echo included), for text_offset.
        self.offsets: dict[int, int] = {}

    def prompt_of(self, choice: Choice) -> Asked:
        return self.run.plan.raw_prompts[choice.index // self.request.n]

    def echo_text(self, choice: Choice) -> str:
        if not self.request.echo:
            return ""
        prompt = self.prompt_of(choice)
        return prompt.text if isinstance(prompt, TextPrompt) else choice.started.prompt_text or ""

    def logprobs(
        self, choice: Choice, entries: tuple[SampledToken, ...] | list[SampledToken]
    ) -> LegacyLogprobs | None:
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

    def _text(self, choice: Choice, text: str, logprobs=None, finish=None) -> Wire:
        piece = CompletionChoice(
            index=choice.index, text=text, logprobs=logprobs, finish_reason=finish
        )
        return self.chunk([piece])

    def opening(self) -> list[Wire]:
        choices = self.run.generation.choices.values()
        return [self._text(c, echo) for c in choices if (echo := self.echo_text(c))]

    def feed(self, choice: Choice, event: Delta | Done) -> list[Wire]:
        if isinstance(event, Delta):
            return [self._text(choice, event.text, self.logprobs(choice, event.logprobs))]
        return [self._text(choice, "", finish=event.finish_reason)]

    async def closing(self) -> list[Wire]:
        if not self.request.include_usage():
            return []
        return [self.chunk([], openai_usage(self.run.generation.usage()))]

    async def response(self) -> Completion:
        choices = [
            CompletionChoice(
                index=choice.index,
                text=self.echo_text(choice) + choice.text,
                logprobs=self.logprobs(choice, choice.logprobs),
                finish_reason=choice.done.finish_reason,
            )
            for choice in self.run.generation.choices.values()
        ]
        usage = openai_usage(self.run.generation.usage())
        return Completion(**envelope(self.run), choices=choices, usage=usage)
