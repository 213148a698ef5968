"""The Messages plan builder: a request as the chat template sees it (system, turns, tool calls
and results, the assistant prefill the reply continues), its tools, thinking and sampling, in
the neutral plan's words. create and count_tokens both plan here, so both count the same
tokens."""

from __future__ import annotations

import json

from inference.protocol.anthropic.requests import (
    Base64ImageSource,
    ImageBlockInput,
    InputMessage,
    InputThinking,
    InputToolResult,
    InputToolUse,
    MessagesInput,
    MessagesRequest,
    TextBlockInput,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
)
from inference.protocol.errors import APIError
from inference.serving.context import RequestContext
from inference.serving.images import ImageSource, template_content
from inference.serving.plan import Plan, ThinkingAsk
from inference.serving.resolve import ResolvedModel
from inference.serving.sampling import SamplingAsk
from inference.serving.tooluse import FunctionTool, ToolUse


def tool_use_of(request: MessagesInput) -> ToolUse:
    choice = request.tool_choice
    forced = choice.name if isinstance(choice, ToolChoiceTool) else None
    tools = tuple(
        FunctionTool(t.name, t.description, t.input_schema)
        for t in request.tools or []
        if not t.defer_loading or t.name == forced
    )
    parallel = not getattr(choice, "disable_parallel_tool_use", False)
    if isinstance(choice, ToolChoiceTool):
        return ToolUse(tools, forced=choice.name, parallel=parallel)
    if isinstance(choice, ToolChoiceAny):
        return ToolUse(tools, "required", parallel=parallel)
    if isinstance(choice, ToolChoiceNone):
        return ToolUse(tools, "none")
    return ToolUse(tools, "auto", parallel=parallel)


def turns(messages: list[InputMessage]) -> list[tuple[str, list]]:
    """Consecutive messages of one role are one turn, as Anthropic reads them."""
    merged: list[tuple[str, list]] = []
    for message in messages:
        if merged and merged[-1][0] == message.role:
            merged[-1][1].extend(message.content)
        else:
            merged.append((message.role, list(message.content)))
    return merged


def message_image_sources(request: MessagesInput) -> list[ImageSource]:
    """Every image block, in order, named by its place in the request."""
    sources = []
    for i, message in enumerate(request.messages):
        for j, block in enumerate(message.content):
            if not isinstance(block, ImageBlockInput):
                continue
            param, source = f"messages.{i}.content.{j}", block.source
            if isinstance(source, Base64ImageSource):
                sources.append(ImageSource(param, data=source.data, media_type=source.media_type))
            else:
                sources.append(ImageSource(param, url=source.url))
    return sources


def _user_content(blocks: list) -> str | list[dict]:
    """Text, or with images a content list: text parts and {"type": "image"} placeholders."""
    if not any(isinstance(b, ImageBlockInput) for b in blocks):
        return _joined(blocks)
    return template_content(
        [
            None if isinstance(b, ImageBlockInput) else b.text
            for b in blocks
            if isinstance(b, ImageBlockInput | TextBlockInput)
        ]
    )


def _joined(blocks: list) -> str:
    return "\n\n".join(block.text for block in blocks if isinstance(block, TextBlockInput))


def _tool_message(result: InputToolResult) -> dict:
    text = result.text()
    return {
        "role": "tool",
        "tool_call_id": result.tool_use_id,
        "content": f"Error: {text}" if result.is_error else text,
    }


def _tool_call(block: InputToolUse) -> dict:
    arguments = json.dumps(block.input, ensure_ascii=False)
    return {
        "id": block.id,
        "type": "function",
        "function": {"name": block.name, "arguments": arguments},
    }


def template_turn(role: str, blocks: list) -> list[dict]:
    """One turn as template messages: a user's tool results become tool messages, and its text
    a user message after them; an assistant's tool_use blocks become tool_calls and its thinking
    blocks `reasoning_content`, which reasoning templates read (each decides whether to show it;
    most drop it before the last user turn). A system turn between others stays where it is
    (the adapter folds it into a user turn for templates that take no late system)."""
    if role == "system":
        return [{"role": "system", "content": _joined(blocks)}]
    if role == "user":
        results = [_tool_message(b) for b in blocks if isinstance(b, InputToolResult)]
        content = _user_content(blocks)
        if content or not results:
            results.append({"role": "user", "content": content})
        return results
    message: dict = {"role": "assistant", "content": _joined(blocks)}
    calls = [_tool_call(b) for b in blocks if isinstance(b, InputToolUse)]
    if calls:
        message["tool_calls"] = calls
    thinking = "\n\n".join(b.thinking for b in blocks if isinstance(b, InputThinking))
    if thinking:
        message["reasoning_content"] = thinking
    return [message]


def split_prefill(conversation: list[tuple[str, list]]) -> tuple[list[tuple[str, list]], str]:
    """A conversation ending with the assistant: that turn is the start of the reply."""
    if conversation[-1][0] != "assistant":
        return conversation, ""
    blocks = conversation[-1][1]
    if any(isinstance(b, InputToolUse) for b in blocks):
        raise APIError(
            "The last message is an assistant tool_use: send its tool_result in a user message "
            "after it.",
            param="messages",
        )
    if not any(role == "user" for role, _ in conversation[:-1]):
        raise APIError(
            "The conversation needs a user message before the assistant's prefill.",
            param="messages",
        )
    return conversation[:-1], _joined(blocks)


def leading_system(conversation: list[tuple[str, list]]) -> tuple[list[str], list]:
    """System turns before the first user or assistant turn (they join the top-level
    system), and the conversation after them."""
    texts: list[str] = []
    while conversation and conversation[0][0] == "system":
        texts.append(_joined(conversation[0][1]))
        conversation = conversation[1:]
    return texts, conversation


def template_messages(request: MessagesInput) -> tuple[list[dict], str]:
    """(messages for the chat template, the assistant prefill). Without a system (top-level or
    leading turns), the catalog's system prompt applies, as for every dialect (plan.py)."""
    early, conversation = leading_system(turns(request.messages))
    if not any(role == "user" for role, _ in conversation):
        raise APIError("The conversation needs a user message.", param="messages")
    conversation, prefill = split_prefill(conversation)
    system = "\n\n".join(text for text in (request.system_text(), *early) if text)
    messages = [{"role": "system", "content": system}] if system else []
    for role, blocks in conversation:
        messages.extend(template_turn(role, blocks))
    return messages, prefill


def sampling_of(request: MessagesInput) -> SamplingAsk:
    """The catalog's defaults fill what the request leaves out, as for chat. max_tokens past
    the model's limit is cut to it (clients such as Claude Code ask for tens of thousands).
    Anthropic takes up to 16 stop sequences. count_tokens asks for no output."""
    if not isinstance(request, MessagesRequest):
        return SamplingAsk()
    return SamplingAsk(
        max_tokens=request.max_tokens,
        cut_to_limit=True,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        stop=tuple(request.stop_sequences or ()),
        speculative=request.speculative,
    )


async def plan_messages(
    request: MessagesInput, resolved: ResolvedModel, ctx: RequestContext
) -> Plan:
    """The plan builder, for create and count_tokens alike."""
    messages, prefill = template_messages(request)
    budget = getattr(request.thinking, "budget_tokens", None)
    return Plan(
        messages=messages,
        sampling=sampling_of(request),
        tool_use=tool_use_of(request),
        thinking=ThinkingAsk(request.thinking_enabled(), budget=budget),
        prefill=prefill,
        images=tuple(message_image_sources(request)),
    )
