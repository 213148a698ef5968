"""OpenAI's plan builders: POST /v1/chat/completions' and POST /v1/completions' (legacy)
bodies as the neutral plan (messages as templates read them, or the raw prompts as sent)."""

from __future__ import annotations

from inference.engine.types import TokenPrompt
from inference.protocol.openai.chat import (
    ChatCompletionRequest,
    ChatMessage,
    NamedToolChoice,
    ResponseFormatJSONObject,
    ResponseFormatJSONSchema,
    TextPart,
)
from inference.protocol.openai.completions import CompletionRequest
from inference.serving.context import RequestContext
from inference.serving.images import ImageSource, template_content
from inference.serving.openai.sampling import sampling_ask
from inference.serving.plan import JSONFormat, Plan, ThinkingAsk
from inference.serving.prompts import TextPrompt
from inference.serving.resolve import ResolvedModel
from inference.serving.structured import ANY_OBJECT
from inference.serving.tooluse import FunctionTool, ToolUse


def content_of(message: ChatMessage) -> str | list[dict]:
    """Text, or with images a content list: text parts and {"type": "image"} placeholders."""
    if not message.image_parts():
        return message.text()
    parts = message.content or []
    return template_content([p.text if isinstance(p, TextPart) else None for p in parts])


def chat_image_sources(messages: list[ChatMessage]) -> list[ImageSource]:
    return [
        ImageSource(f"messages.{i}.content.{j}", url=part.image_url.url)
        for i, message in enumerate(messages)
        for j, part in message.image_parts()
    ]


def message_dict(message: ChatMessage) -> dict:
    # Templates know "system", not OpenAI's newer "developer".
    role = "system" if message.role == "developer" else message.role
    out: dict = {"role": role, "content": content_of(message)}
    if message.tool_calls:
        out["tool_calls"] = [call.model_dump() for call in message.tool_calls]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    # Templates decide whether earlier thinking shows (most drop it before the last user turn).
    reasoning = message.reasoning_content or message.reasoning
    if message.role == "assistant" and reasoning:
        out["reasoning_content"] = reasoning
    return out


def chat_tool_use(request: ChatCompletionRequest) -> ToolUse:
    tools = tuple(
        FunctionTool(t.function.name, t.function.description, t.function.parameters)
        for t in request.tools or []
    )
    choice = request.effective_tool_choice()
    if isinstance(choice, NamedToolChoice):
        return ToolUse(tools, forced=choice.function.name, parallel=request.parallel_tool_calls)
    asked = "parallel_tool_calls" in request.model_fields_set
    return ToolUse(tools, choice, parallel=request.parallel_tool_calls, parallel_asked=asked)  # type: ignore[arg-type]


def thinking_asked(request: ChatCompletionRequest, switch: str) -> bool | None:
    """The template's own switch in chat_template_kwargs wins; then reasoning_effort."""
    kwargs = request.chat_template_kwargs or {}
    if switch and switch in kwargs:
        return bool(kwargs[switch])
    if request.reasoning_effort is None:
        return None
    return request.reasoning_effort != "none"


def response_format_json(response_format: object) -> JSONFormat | None:
    if isinstance(response_format, ResponseFormatJSONObject):
        return JSONFormat(ANY_OBJECT, "response_format")
    if isinstance(response_format, ResponseFormatJSONSchema):
        schema = response_format.json_schema.schema_ or ANY_OBJECT
        return JSONFormat(schema, "response_format.json_schema.schema")
    return None


async def plan_chat_completion(
    request: ChatCompletionRequest, resolved: ResolvedModel, ctx: RequestContext
) -> Plan:
    """The plan builder: a chat request in the neutral plan's words."""
    switch = resolved.adapter.profile.thinking_switch
    return Plan(
        messages=[message_dict(m) for m in request.messages],
        sampling=sampling_ask(
            request,
            max_tokens=request.output_limit(),
            logprobs=request.logprobs,
            top_logprobs=request.top_logprobs or 0,
        ),
        tool_use=chat_tool_use(request),
        json_format=response_format_json(request.response_format),
        thinking=ThinkingAsk(thinking_asked(request, switch), effort=request.reasoning_effort),
        template_kwargs=dict(request.chat_template_kwargs or {}),
        images=tuple(chat_image_sources(request.messages)),
        n=request.n,
    )


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
