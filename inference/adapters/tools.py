"""Prompting for tool calls in the Hermes convention, for templates that know no tools (reading
them back, in every family's syntax, is toolcalls/)."""

from __future__ import annotations

import json
from typing import Any


def template_supports_tools(template: str | None) -> bool:
    return bool(template) and "tools" in template


def template_writes_calls(template: str | None) -> bool:
    """Templates that render assistant tool calls and results natively, even where they do
    not describe the offered tools (DeepSeek V3.1, R1 distills)."""
    return bool(template) and "tool_calls" in template


def tool_system_prompt(tools: list[dict], example: str | None = None) -> str:
    """For templates that do not describe tools themselves: the functions, and how to call
    one: the Hermes convention, or `example`, a call as the family writes calls."""
    signatures = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    head = (
        "You may call functions to help with the user's request. The functions are:\n"
        f"<tools>\n{signatures}\n</tools>\n"
    )
    if example is not None:
        return f"{head}To call one, write the call exactly in this form:\n{example}"
    return (
        f"{head}To call one, answer with a JSON object naming it and its arguments inside tags:\n"
        '<tool_call>\n{"name": "function_name", "arguments": {"arg": "value"}}\n</tool_call>'
    )


def with_tool_prompt(messages: list[dict], prompt: str) -> list[dict]:
    """`prompt` appended to the system message (one is added first when there is none)."""
    out = list(messages)
    if out and out[0]["role"] == "system":
        out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{prompt}"}
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out


def inline_tool_history(messages: list[dict], tools: list[dict]) -> list[dict]:
    """Writes tool calls and results as plain text for templates without tool support. With
    no tools offered the system prompt stays as sent: an empty function list says nothing,
    and appearing once the first call is in the history would change the prompt's head
    between turns (the prefix cache would then reuse nothing past it)."""
    out: list[dict] = []
    schemas = parameter_schemas(tools)
    for message in messages:
        if message["role"] == "assistant" and message.get("tool_calls"):
            calls = "\n".join(
                "<tool_call>\n"
                + json.dumps(
                    {
                        "name": c["function"]["name"],
                        "arguments": stable_order(
                            arguments_value(c), schemas.get(c["function"]["name"])
                        ),
                    }
                )
                + "\n</tool_call>"
                for c in message["tool_calls"]
            )
            text = f"{message.get('content') or ''}\n{calls}".strip()
            out.append(_with_reasoning({"role": "assistant", "content": text}, message))
        elif message["role"] == "tool":
            out.append(
                {
                    "role": "user",
                    "content": f"<tool_response>\n{message['content']}\n</tool_response>",
                }
            )
        else:
            plain = {"role": message["role"], "content": message.get("content") or ""}
            out.append(_with_reasoning(plain, message))
    return with_tool_prompt(out, tool_system_prompt(tools)) if tools else out


def _with_reasoning(out: dict, message: dict) -> dict:
    # Kept for the template to show or drop, as it does with native tool history.
    if message.get("reasoning_content"):
        out["reasoning_content"] = message["reasoning_content"]
    return out


def arguments_value(call: dict) -> object:
    """A call's arguments as the object its JSON string holds; the text as it came when it is
    not JSON (or nests past the recursion limit)."""
    arguments = call["function"]["arguments"]
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except (ValueError, RecursionError):  # deep nesting: text as it came
            return arguments
    return arguments


def parameter_schemas(tools: list[dict] | None) -> dict[str, dict]:
    """Each offered function's parameters schema, by name."""
    functions = (tool.get("function") or {} for tool in tools or [])
    return {f["name"]: f.get("parameters") or {} for f in functions if "name" in f}


def stable_order(value: Any, schema: dict | None) -> Any:
    """Objects with their keys in the schema's `properties` order, then the others sorted;
    nested values by their own sub-schemas."""
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(value, list):
        items = schema.get("items")
        return [stable_order(item, items) for item in value]
    if not isinstance(value, dict):
        return value
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    known = [key for key in properties if key in value]
    rest = sorted(key for key in value if key not in properties)
    return {key: stable_order(value[key], properties.get(key)) for key in known + rest}
