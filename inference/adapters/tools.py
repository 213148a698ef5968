"""Tool calling in the models' own syntaxes: prompting for it and parsing it back."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object, as OpenAI sends it


@dataclass(frozen=True)
class ParsedOutput:
    content: str | None
    calls: tuple[ParsedCall, ...] = ()


def template_supports_tools(template: str | None) -> bool:
    return bool(template) and "tools" in template


def tool_system_prompt(tools: list[dict]) -> str:
    """For templates that know nothing of tools: describe them in the Hermes convention."""
    signatures = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "You may call functions to help with the user's request. The functions are:\n"
        f"<tools>\n{signatures}\n</tools>\n"
        "To call one, answer with a JSON object naming it and its arguments inside tags:\n"
        '<tool_call>\n{"name": "function_name", "arguments": {"arg": "value"}}\n</tool_call>'
    )


def inline_tool_history(messages: list[dict], tools: list[dict]) -> list[dict]:
    """Writes tool calls and results as plain text for templates without tool support."""
    out: list[dict] = []
    for message in messages:
        if message["role"] == "assistant" and message.get("tool_calls"):
            calls = "\n".join(
                "<tool_call>\n"
                + json.dumps({"name": c["function"]["name"], "arguments": _as_object(c)})
                + "\n</tool_call>"
                for c in message["tool_calls"]
            )
            text = f"{message.get('content') or ''}\n{calls}".strip()
            out.append({"role": "assistant", "content": text})
        elif message["role"] == "tool":
            out.append(
                {
                    "role": "user",
                    "content": f"<tool_response>\n{message['content']}\n</tool_response>",
                }
            )
        else:
            out.append({"role": message["role"], "content": message.get("content") or ""})
    prompt = tool_system_prompt(tools)
    if out and out[0]["role"] == "system":
        out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{prompt}"}
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out


def _as_object(call: dict) -> object:
    arguments = call["function"]["arguments"]
    if isinstance(arguments, str):
        parsed = _loads(arguments)
        return parsed if parsed is not None else arguments
    return arguments


def _call_from(obj: object) -> ParsedCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(obj["name"], json.dumps(arguments, ensure_ascii=False))


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def parse_hermes(text: str) -> ParsedOutput | None:
    """Qwen / Hermes / ChatML: <tool_call>{"name": ..., "arguments": {...}}</tool_call>."""
    start = text.find("<tool_call>")
    if start < 0:
        return None
    calls = [_call_from(_loads(body)) for body in _HERMES.findall(text[start:])]
    if not calls or None in calls:
        return None
    return ParsedOutput(text[:start].strip() or None, tuple(calls))  # type: ignore[arg-type]


def parse_llama3(text: str) -> ParsedOutput | None:
    """Llama 3: a bare JSON object (or several, split by ';'), maybe after <|python_tag|>."""
    body = text.strip().removeprefix("<|python_tag|>").strip()
    if not body.startswith("{"):
        return None
    parts = [_loads(body)] if _loads(body) is not None else [_loads(p) for p in body.split(";")]
    calls = [_call_from(p) for p in parts]
    if not calls or None in calls:
        return None
    return ParsedOutput(None, tuple(calls))  # type: ignore[arg-type]


_MISTRAL_NEW = re.compile(
    r"\[TOOL_CALLS\]\s*([\w.-]+)\s*\[ARGS\]\s*(\{.*?\})(?=\s*\[TOOL_CALLS\]|\s*$)", re.DOTALL
)


def parse_mistral(text: str) -> ParsedOutput | None:
    """Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}], or [TOOL_CALLS]name[ARGS]{...}."""
    start = text.find("[TOOL_CALLS]")
    if start < 0:
        return None
    content = text[:start].strip() or None
    rest = text[start + len("[TOOL_CALLS]") :].strip()
    listed = _loads(rest)
    if isinstance(listed, dict):
        listed = [listed]
    if isinstance(listed, list):
        calls = [_call_from(item) for item in listed]
    else:
        calls = [
            _call_from({"name": name, "arguments": _loads(args)})
            for name, args in _MISTRAL_NEW.findall(text[start:])
        ]
    if not calls or None in calls:
        return None
    return ParsedOutput(content, tuple(calls))  # type: ignore[arg-type]
