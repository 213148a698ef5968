"""Ollama's /api/chat and /api/generate bodies as the neutral plan: messages as chat templates
read them, `options` as the sampling ask, `format` as a JSON format, `think` as the thinking
ask, `tools` as the tools offered (Ollama has no tool_choice: the model decides)."""

from __future__ import annotations

from inference.protocol.errors import APIError
from inference.protocol.ollama.requests import (
    ChatRequest,
    Format,
    GenerateRequest,
    Generating,
    Message,
    Options,
    Think,
)
from inference.serving.context import RequestContext
from inference.serving.images import ImageSource, template_content
from inference.serving.plan import JSONFormat, Plan, ThinkingAsk
from inference.serving.prompts import TextPrompt
from inference.serving.resolve import ResolvedModel
from inference.serving.sampling import SamplingAsk
from inference.serving.structured import ANY_OBJECT
from inference.serving.tooluse import FunctionTool, ToolUse


def options_sampling(options: Options) -> SamplingAsk:
    """Ollama's options in the neutral ask. num_predict < 0 (no limit, fill the context)
    leaves the limit to the model; num_ctx and the other load-time options are not used."""
    predict = options.num_predict
    return SamplingAsk(
        max_tokens=predict if predict is not None and predict > 0 else None,
        max_tokens_param="options.num_predict",
        # Ollama generates up to num_predict whatever the model allows; we give what it allows.
        cut_to_limit=True,
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=options.top_k,
        min_p=options.min_p,
        seed=options.seed,
        stop=tuple(options.stop or ()),
        presence_penalty=options.presence_penalty,
        frequency_penalty=options.frequency_penalty,
        repetition_penalty=options.repeat_penalty,
    )


def format_json(format: Format | None) -> JSONFormat | None:
    if format == "json":
        return JSONFormat(ANY_OBJECT, "format")
    if isinstance(format, dict):
        return JSONFormat(format or ANY_OBJECT, "format")
    return None


def thinking_ask(think: Think | None) -> ThinkingAsk:
    """true/false, or an effort ("low", "medium", "high") that also turns thinking on."""
    if think is None or isinstance(think, bool):
        return ThinkingAsk(think)
    return ThinkingAsk(True, effort=think)


def _tool_calls(message: Message, index: int) -> list[dict]:
    """Ollama's calls carry no id; templates pair calls and results by one, so each gets one."""
    return [
        {
            "id": f"call_{index}_{j}",
            "type": "function",
            "function": {"name": call.function.name, "arguments": call.function.arguments},
        }
        for j, call in enumerate(message.tool_calls or [])
    ]


def message_dicts(messages: list[Message]) -> list[dict]:
    """The conversation as chat templates read it (OpenAI's message shape): a tool result is
    paired with the earliest unanswered call of its tool (or of any tool, unnamed)."""
    out: list[dict] = []
    pending: list[dict] = []
    for i, message in enumerate(messages):
        content: str | list[dict] = message.content
        if message.images:
            content = template_content([message.content, *[None] * len(message.images)])
        entry: dict = {"role": message.role, "content": content}
        if message.role == "assistant":
            if calls := _tool_calls(message, i):
                entry["tool_calls"], pending = calls, list(calls)
            if message.thinking:
                entry["reasoning_content"] = message.thinking
        if message.role == "tool":
            named = [c for c in pending if c["function"]["name"] == message.tool_name]
            call = (named or pending or [None])[0]
            if call is not None:
                pending.remove(call)
                entry["tool_call_id"] = call["id"]
            if message.tool_name:
                entry["name"] = message.tool_name
        out.append(entry)
    return out


def ollama_image_sources(messages: list[Message]) -> list[ImageSource]:
    return [
        ImageSource(f"messages.{i}.images.{j}", data=image)
        for i, message in enumerate(messages)
        for j, image in enumerate(message.images or [])
    ]


def ollama_tool_use(request: ChatRequest) -> ToolUse:
    tools = tuple(
        FunctionTool(t.function.name, t.function.description or None, t.function.parameters or None)
        for t in request.tools or []
    )
    return ToolUse(tools, "auto")


def _common(request: Generating) -> dict:
    return {
        "sampling": options_sampling(request.sampling),
        "json_format": format_json(request.format),
        "thinking": thinking_ask(request.think),
    }


async def plan_ollama_chat(
    request: ChatRequest, resolved: ResolvedModel, ctx: RequestContext
) -> Plan:
    """The plan builder of /api/chat."""
    return Plan(
        messages=message_dicts(request.messages),
        tool_use=ollama_tool_use(request),
        images=tuple(ollama_image_sources(request.messages)),
        **_common(request),
    )


async def plan_ollama_generate(
    request: GenerateRequest, resolved: ResolvedModel, ctx: RequestContext
) -> Plan:
    """The plan builder of /api/generate: the prompt as one user turn (after `system`), or with
    raw: true sent as it is, no template."""
    if request.suffix:
        raise APIError("suffix (fill in the middle) is not supported here.", param="suffix")
    if request.template:
        raise APIError(
            "template is not supported: this server renders the model's own chat template.",
            param="template",
        )
    if request.raw:
        if request.images:
            raise APIError("images need the chat template: leave raw out.", param="images")
        return Plan(raw_prompts=(TextPrompt(request.prompt),), **_common(request))
    user = Message(role="user", content=request.prompt, images=request.images)
    system = [Message(role="system", content=request.system)] if request.system else []
    messages = [*system, user]
    return Plan(
        messages=message_dicts(messages),
        messages_param="prompt",
        images=tuple(
            ImageSource(f"images.{j}", data=image) for j, image in enumerate(request.images or [])
        ),
        **_common(request),
    )
