"""The Responses plan builder: the conversation (the previous response chain, then this
input), the tools, the text format, thinking and sampling, in the neutral plan's words."""

from __future__ import annotations

from dataclasses import dataclass

from apikeys.auth import Caller
from inference.protocol.openai.responses_options import (
    FunctionToolChoice,
    TextFormatJSONObject,
    TextFormatJSONSchema,
)
from inference.protocol.openai.responses_request import ResponseRequest
from inference.serving.context import RequestContext
from inference.serving.plan import JSONFormat, Plan, ThinkingAsk
from inference.serving.resolve import ResolvedModel
from inference.serving.responses.items import (
    chat_messages,
    check_call_outputs,
    input_image_sources,
    stored_input_item,
)
from inference.serving.responses.store import admit_to_store, conversation_before
from inference.serving.sampling import SamplingAsk
from inference.serving.structured import ANY_OBJECT
from inference.serving.tooluse import FunctionTool, ToolUse


@dataclass(frozen=True)
class Conversation:
    history: list[dict]  # items of the previous responses, oldest first
    new_items: list[dict]  # this request's input items, with their ids, as they are stored


async def gather_conversation(request: ResponseRequest, caller: Caller) -> Conversation:
    history: list[dict] = []
    if request.previous_response_id:
        history = await conversation_before(caller, request.previous_response_id)
    new_items = [stored_input_item(item) for item in request.input_items()]
    await admit_to_store(request, new_items, caller)  # size caps and quota, before any work
    check_call_outputs(history, new_items)
    return Conversation(history, new_items)


def prompt_messages(request: ResponseRequest, conversation: Conversation) -> list[dict]:
    """instructions first (never carried over from a previous response, as OpenAI does)."""
    offered = {
        (function.namespace, function.tool.name): function.offered
        for function in request.functions()
        if function.namespace
    }
    messages = chat_messages(conversation.history + conversation.new_items, offered)
    if request.instructions:
        messages.insert(0, {"role": "system", "content": request.instructions})
    return messages


def responses_tool_use(request: ResponseRequest) -> ToolUse:
    tools = tuple(
        FunctionTool(f.offered, f.tool.description, f.tool.parameters) for f in request.functions()
    )
    choice = request.effective_tool_choice()
    parallel = request.parallel_tool_calls
    if isinstance(choice, FunctionToolChoice):
        return ToolUse(tools, "required", forced=choice.name, parallel=parallel)
    asked = "parallel_tool_calls" in request.model_fields_set
    return ToolUse(tools, choice, parallel=parallel, parallel_asked=asked)  # type: ignore[arg-type]


def text_format(request: ResponseRequest) -> JSONFormat | None:
    text_format = request.text_config().format
    if isinstance(text_format, TextFormatJSONObject):
        return JSONFormat(ANY_OBJECT, "text.format")
    if isinstance(text_format, TextFormatJSONSchema):
        return JSONFormat(text_format.schema_ or ANY_OBJECT, "text.format.schema")
    return None


async def plan_response(
    request: ResponseRequest, resolved: ResolvedModel, ctx: RequestContext
) -> Plan:
    """The plan builder. The writer stores the request's input items (`kept`) with the
    response."""
    conversation = await gather_conversation(request, ctx.caller)
    reasoning = request.reasoning
    sampling = SamplingAsk(
        max_tokens=request.max_output_tokens,
        max_tokens_param="max_output_tokens",
        temperature=request.temperature,
        top_p=request.top_p,
        speculative=request.speculative,
    )
    return Plan(
        messages=prompt_messages(request, conversation),
        messages_param="input",
        sampling=sampling,
        tool_use=responses_tool_use(request),
        json_format=text_format(request),
        thinking=ThinkingAsk(
            reasoning.enabled() if reasoning else None,
            effort=reasoning.effort if reasoning else None,
        ),
        images=tuple(input_image_sources(conversation.history, conversation.new_items)),
        kept=conversation.new_items,
    )
