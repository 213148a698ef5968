"""From a Responses request to what the engine runs: the conversation (the previous response
chain, then this input), the tools, the grammar, thinking and the sampling parameters."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from apikeys.auth import Caller
from catalog.models import CatalogModel
from inference.engine.types import ChatPrompt, SamplingParams
from inference.protocol.errors import APIError
from inference.protocol.openai.common import SamplingFields
from inference.protocol.openai.responses import (
    FunctionToolChoice,
    ResponseRequest,
    TextFormatJSONObject,
    TextFormatJSONSchema,
)
from inference.serving.images import load_images
from inference.serving.resolve import ResolvedModel
from inference.serving.responses.items import (
    chat_messages,
    check_call_outputs,
    image_sources,
    stored_input_item,
)
from inference.serving.responses.store import admit_to_store, conversation_before
from inference.serving.sampling import sampling_params
from inference.serving.structured import ANY_OBJECT, json_grammar
from inference.serving.thinking import ThinkingPlan, plan_thinking
from inference.serving.tooluse import FunctionTool, ToolUse


@dataclass(frozen=True)
class Conversation:
    history: list[dict]  # items of the previous responses, oldest first
    new_items: list[dict]  # this request's input items, with their ids, as they are stored


async def conversation_images(conversation: Conversation, resolved: ResolvedModel) -> tuple:
    """The conversation's images, decoded and checked (a 400 naming the part otherwise)."""
    sources = image_sources(conversation.history, conversation.new_items)
    return await load_images(sources, resolved.spec.model_id, resolved.spec.vision)


async def gather_conversation(request: ResponseRequest, caller: Caller) -> Conversation:
    history: list[dict] = []
    if request.previous_response_id:
        history = await conversation_before(caller, request.previous_response_id)
    new_items = [stored_input_item(item) for item in request.input_items()]
    await admit_to_store(request, new_items, caller)  # size caps and quota, before any work
    check_call_outputs(history, new_items)
    return Conversation(history, new_items)


def prompt_messages(
    request: ResponseRequest, conversation: Conversation, entry: CatalogModel
) -> list[dict]:
    """instructions first (never carried over from a previous response, as OpenAI does)."""
    offered = {
        (function.namespace, function.tool.name): function.offered
        for function in request.functions()
        if function.namespace
    }
    messages = chat_messages(conversation.history + conversation.new_items, offered)
    if request.instructions:
        messages.insert(0, {"role": "system", "content": request.instructions})
    if entry.system_prompt and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": entry.system_prompt})
    if len(messages) > settings.MAX_MESSAGES:
        raise APIError(
            f"Too many messages in the conversation: {len(messages)}; this server takes at "
            f"most {settings.MAX_MESSAGES}.",
            param="input",
            code="too_many_messages",
        )
    return messages


def tool_use(request: ResponseRequest) -> ToolUse:
    tools = tuple(
        FunctionTool(f.offered, f.tool.description, f.tool.parameters) for f in request.functions()
    )
    choice = request.effective_tool_choice()
    parallel = request.parallel_tool_calls
    if isinstance(choice, FunctionToolChoice):
        return ToolUse(tools, "required", forced=choice.name, parallel=parallel)
    asked = "parallel_tool_calls" in request.model_fields_set
    return ToolUse(tools, choice, parallel=parallel, parallel_asked=asked)  # type: ignore[arg-type]


def text_grammar(request: ResponseRequest) -> str | None:
    text_format = request.text_config().format
    if isinstance(text_format, TextFormatJSONObject):
        return json_grammar(ANY_OBJECT, "text.format")
    if isinstance(text_format, TextFormatJSONSchema):
        return json_grammar(text_format.schema_ or ANY_OBJECT, "text.format.schema")
    return None


def sampling(request: ResponseRequest, entry: CatalogModel, grammar: str | None) -> SamplingParams:
    fields = SamplingFields(
        model=request.model, temperature=request.temperature, top_p=request.top_p
    )
    return sampling_params(
        fields,
        entry,
        max_tokens=request.max_output_tokens,
        grammar=grammar,
        max_tokens_param="max_output_tokens",
    )


@dataclass(frozen=True)
class Plan:
    prompt: ChatPrompt
    params: SamplingParams
    tool_use: ToolUse
    thinking: ThinkingPlan


def plan_generation(
    request: ResponseRequest,
    conversation: Conversation,
    resolved: ResolvedModel,
    images: tuple = (),
) -> Plan:
    use = tool_use(request)
    grammar = use.grammar(resolved.adapter.tool_syntax(), "tools") or text_grammar(request)
    enabled = request.reasoning.enabled() if request.reasoning else None
    effort = request.reasoning.effort if request.reasoning else None
    thinking = plan_thinking(
        resolved.adapter, enabled, constrained=grammar is not None, effort=effort
    )
    messages = prompt_messages(request, conversation, resolved.entry)
    prompt = ChatPrompt(
        messages, use.template_tools(), thinking.template_kwargs or None, images=images
    )
    return Plan(prompt, sampling(request, resolved.entry, grammar), use, thinking)
