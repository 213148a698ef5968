"""Items as a response keeps them (each with its own id) and the chat messages the model reads
from them. Stored items have the shapes of the SDK's ResponseItem union."""

from __future__ import annotations

import secrets

from inference.protocol.errors import APIError
from inference.protocol.openai.responses_input import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputImage,
    MessageItem,
    ReasoningInputItem,
)
from inference.serving.images import ImageSource, template_content


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def stored_input_item(item: MessageItem | FunctionCallItem | FunctionCallOutputItem) -> dict:
    """An input item as kept and listed by GET /v1/responses/{id}/input_items."""
    if isinstance(item, MessageItem) and item.has_images():
        return {
            "id": new_id("msg"),
            "type": "message",
            "role": item.role,
            "status": "completed",
            "content": [_stored_part(part) for part in item.content],
        }
    if isinstance(item, MessageItem):
        # Assistant turns are listed as the output messages they once were.
        kind = "output_text" if item.role == "assistant" else "input_text"
        part: dict = {"type": kind, "text": item.text()}
        if kind == "output_text":
            part["annotations"] = []
        return {
            "id": new_id("msg"),
            "type": "message",
            "role": item.role,
            "status": "completed",
            "content": [part],
        }
    if isinstance(item, FunctionCallItem):
        stored = {
            "id": item.id or new_id("fc"),
            "type": "function_call",
            "status": "completed",
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
        }
        if item.namespace:
            stored["namespace"] = item.namespace
        return stored
    if isinstance(item, FunctionCallOutputItem):
        return {
            "id": item.id or new_id("fco"),
            "type": "function_call_output",
            "status": "completed",
            "call_id": item.call_id,
            "output": item.text(),
        }
    assert isinstance(item, ReasoningInputItem)
    return {**item.model_dump(exclude_none=True), "id": item.id or new_id("rs")}


def _stored_part(part) -> dict:
    """A part of a message with images, kept in its place (so content.J still names it)."""
    if isinstance(part, InputImage):
        return {"type": "input_image", "image_url": part.image_url, "detail": part.detail}
    return {"type": "input_text", "text": part.text}


def message_content(item: dict) -> str | list[dict]:
    """Text, or with images a content list: text parts and {"type": "image"} placeholders."""
    parts = item.get("content", [])
    if not any(part.get("type") == "input_image" for part in parts):
        return item_text(item)
    return template_content(
        [None if part.get("type") == "input_image" else part["text"] for part in parts]
    )


def input_image_sources(history: list[dict], new_items: list[dict]) -> list[ImageSource]:
    """The conversation's images, in the order of their placeholders: earlier responses' (named
    by previous_response_id), then this input's (input.I.content.J)."""
    named = [("previous_response_id", item, None) for item in history]
    named += [(f"input.{i}", item, i) for i, item in enumerate(new_items)]
    return [
        ImageSource(where if index is None else f"{where}.content.{j}", url=part["image_url"])
        for where, item, index in named
        if item["type"] == "message"
        for j, part in enumerate(item.get("content", []))
        if part.get("type") == "input_image"
    ]


def item_text(item: dict) -> str:
    return "".join(part.get("text", "") for part in item.get("content", []))


def chat_messages(
    items: list[dict], offered: dict[tuple[str, str], str] | None = None
) -> list[dict]:
    """The conversation the chat template renders: messages, an assistant turn's calls folded
    into it, results as tool messages. A reasoning item's text goes to the assistant turn after
    it as `reasoning_content`, where reasoning templates read it (each decides whether to show
    it; most drop it before the last user turn). A call of a namespace tool's function reads
    under the name the model is offered it by (`offered`: (namespace, name) -> offered name)."""
    messages: list[dict] = []
    names: dict[str, str] = {}
    reasoning: list[str] = []
    for item in items:
        kind = item["type"]
        if kind == "reasoning":
            reasoning.append(reasoning_text(item))
        elif kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": message_content(item)})
        elif kind == "function_call":
            names[item["call_id"]] = _call_name(item, offered)
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": names[item["call_id"]], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": ""}
                messages.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            message = {"role": "tool", "content": item["output"], "tool_call_id": item["call_id"]}
            if item["call_id"] in names:
                message["name"] = names[item["call_id"]]
            messages.append(message)
        if kind != "reasoning" and reasoning:
            _give_reasoning(messages, "".join(reasoning))
            reasoning = []
    return messages


def _give_reasoning(messages: list[dict], text: str) -> None:
    """Reasoning belongs to the assistant turn that follows it; one turn's several pieces (a
    message, then more reasoning before its calls) are kept in order."""
    if not text or not messages or messages[-1]["role"] != "assistant":
        return
    prior = messages[-1].get("reasoning_content")
    messages[-1]["reasoning_content"] = f"{prior}\n\n{text}" if prior else text


def _call_name(item: dict, offered: dict[tuple[str, str], str] | None) -> str:
    if item.get("namespace"):
        return (offered or {}).get((item["namespace"], item["name"]), item["name"])
    return item["name"]


def reasoning_text(item: dict) -> str:
    """A reasoning item's text: its reasoning_text parts, what the model wrote. A summary alone
    (OpenAI's items, with the reasoning encrypted) is not the model's text: left out."""
    parts = item.get("content") or []
    return "".join(part.get("text", "") for part in parts if isinstance(part, dict))


def check_call_outputs(history: list[dict], new: list[dict]) -> None:
    """Each function_call_output answers a call made earlier in the conversation."""
    calls = {item["call_id"] for item in history + new if item["type"] == "function_call"}
    for index, item in enumerate(new):
        if item["type"] == "function_call_output" and item["call_id"] not in calls:
            raise APIError(
                f"No tool call found for function call output with call_id {item['call_id']}.",
                param=f"input.{index}.call_id",
            )
