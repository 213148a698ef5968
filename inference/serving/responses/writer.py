"""POST /v1/responses, the reply writer: engine events into a response object, or into its
typed event stream. Finished responses (completed, incomplete, or failed mid-stream) are stored
unless the request said `store: false`; a stream whose client leaves before its end stores
nothing."""

from __future__ import annotations

from inference.engine.types import Delta, Done
from inference.protocol.errors import APIError
from inference.protocol.openai.responses_events import ResponseLifecycleEvent
from inference.protocol.openai.responses_object import (
    IncompleteDetails,
    InputTokensDetails,
    OutputTokensDetails,
    ResponseError,
    ResponseObject,
    ResponseUsage,
)
from inference.protocol.openai.responses_options import ReasoningConfig
from inference.protocol.openai.responses_request import ResponseRequest
from inference.serving.generation import Choice
from inference.serving.ids import now
from inference.serving.reply import ReasoningDelta
from inference.serving.responses import store
from inference.serving.responses.items import new_id
from inference.serving.responses.output import OutputBuilder
from inference.serving.sse import Wire
from inference.serving.writer import ReplyWriter, Run

OUTCOME_EVENTS = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}


def echoed_reasoning(reasoning: ReasoningConfig | None) -> ReasoningConfig | None:
    """The reasoning settings as OpenAI echoes them (a summary of "none" is no summary)."""
    if reasoning is None or reasoning.summary in (None, "auto", "concise", "detailed"):
        return reasoning
    return reasoning.model_copy(update={"summary": None})


def response_shell(request: ResponseRequest, run: Run, response_id: str) -> ResponseObject:
    """The parameters a response echoes, as used (temperature after the catalog's default)."""
    return ResponseObject(
        id=response_id,
        created_at=now(),
        status="in_progress",
        model=request.model,
        instructions=request.instructions,
        output=[],
        metadata=request.metadata or {},
        parallel_tool_calls=request.parallel_tool_calls,
        temperature=run.params.temperature,
        top_p=run.params.top_p,
        max_output_tokens=request.max_output_tokens,
        tool_choice=request.effective_tool_choice(),
        tools=request.tools or [],
        text=request.text_config(),
        reasoning=echoed_reasoning(request.reasoning),
        previous_response_id=request.previous_response_id,
        store=request.store,
        user=request.user,
    )


class ResponseWriter(ReplyWriter):
    """response.created, response.in_progress, the output's events as the reply grows, then
    response.completed, .incomplete or .failed, every event numbered; or the whole response."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.request: ResponseRequest = run.body  # type: ignore[assignment]
        self.parser = run.parser()
        self.shell = response_shell(self.request, run, new_id("resp"))
        functions = self.request.functions()
        namespaced = {f.offered: (f.namespace, f.tool.name) for f in functions if f.namespace}
        self.builder = OutputBuilder(namespaced)
        self.reasoning_tokens = 0
        self.outcome: ResponseObject | None = None  # once the reply ended

    def take(self, text: str) -> None:
        events = self.parser.feed(text)
        # Each delta is a sampled token: one that only reasoned counts as a reasoning token.
        if events and all(isinstance(e, ReasoningDelta) for e in events):
            self.reasoning_tokens += 1
        for event in events:
            self.builder.add(event)

    def finish(self, done: Done) -> ResponseObject:
        for event in self.parser.finish():
            self.builder.add(event)
        complete = done.finish_reason != "length"
        self.builder.finish(complete)
        if complete:
            return self.final("completed")
        return self.final(
            "incomplete", incomplete_details=IncompleteDetails(reason="max_output_tokens")
        )

    def final(self, status: str, **fields) -> ResponseObject:
        return self.shell.model_copy(
            update={
                "status": status,
                "completed_at": now() if status == "completed" else None,
                "output": self.builder.output,
                "usage": self.usage(),
                **fields,
            }
        )

    def usage(self) -> ResponseUsage:
        usage = self.run.generation.usage()
        return ResponseUsage(
            input_tokens=usage.prompt,
            input_tokens_details=InputTokensDetails(cached_tokens=usage.cached),
            output_tokens=usage.completion,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=self.reasoning_tokens),
            total_tokens=usage.total,
            truncated_messages=usage.truncated_messages or None,
        )

    async def keep(self, response: ResponseObject) -> None:
        if self.request.store:
            await store.save(response, self.run.ctx.caller, self.run.plan.kept)  # type: ignore[arg-type]

    def lifecycle(self, kind: str, response: ResponseObject) -> ResponseLifecycleEvent:
        return ResponseLifecycleEvent(
            type=kind, sequence_number=self.builder.number(), response=response
        )

    def opening(self) -> list[Wire]:
        return [
            self.lifecycle("response.created", self.shell),
            self.lifecycle("response.in_progress", self.shell),
        ]

    def feed(self, choice: Choice, event: Delta | Done) -> list[Wire]:
        if isinstance(event, Delta):
            self.take(event.text)
        else:
            self.outcome = self.finish(event)
        return self.builder.drain()  # type: ignore[return-value]

    async def closing(self) -> list[Wire]:
        assert self.outcome is not None  # the events end after the last Done
        await self.keep(self.outcome)
        return [self.lifecycle(OUTCOME_EVENTS[self.outcome.status], self.outcome)]

    async def failed(self, error: APIError) -> list[Wire] | None:
        """A reply the engine failed midway is a failed response, stored as such. One that
        ended and could not be stored ends with the dialect's error event."""
        if self.outcome is not None:
            return None
        self.builder.finish(complete=False)
        code = "rate_limit_exceeded" if error.status == 429 else "server_error"
        self.outcome = self.final("failed", error=ResponseError(code=code, message=error.message))
        events: list[Wire] = [*self.builder.drain()]
        await self.keep(self.outcome)
        return [*events, self.lifecycle("response.failed", self.outcome)]

    async def response(self) -> ResponseObject:
        choice = self.run.generation.choices[0]
        for part in choice.parts:  # one per sampled token, as a stream reads them
            self.take(part)
        assert choice.done is not None  # the generation finished
        response = self.finish(choice.done)
        await self.keep(response)
        return response
