"""gpt-oss: the harmony format's channels read into reasoning, content and calls, its stops,
and its history (thinking passed back as the template's `thinking`).

A reply is a row of messages, each a header then `<|message|>` then its body:
`<|channel|>analysis` is thinking, `<|channel|>final` the answer, `<|channel|>commentary` with
no recipient a preamble the user sees, and a message `to=functions.NAME` a call. gpt-oss always
writes channels, so its reader is the same whether or not the request thinks."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from inference.adapters.base import FamilyAdapter, Tokenizer
from inference.adapters.reasoning import Part, ReplyReader, Thinking
from inference.adapters.toolcalls.harmony import (
    CALL,
    ENDS,
    MESSAGE,
    OPENS,
    first_marker,
    held_back,
    parse_header,
)

BodyKind = Literal["reasoning", "content", "calls"] | None


class HarmonyReader:
    """Splits a harmony reply, as it streams, into parts; headers never reach the content. A
    call goes on as "calls" parts: its header with `<|message|>`, its body, and an end marker,
    which the harmony tool syntax reads. Text outside any message (a quant that forgot its
    channel) is content."""

    def __init__(self) -> None:
        self._state: Literal["opening", "outside", "header", "body"] = "opening"
        self._held = ""
        self._kind: BodyKind = None
        self._after_message = False  # blanks between messages are not content

    def feed(self, text: str) -> list[Part]:
        self._held += text
        parts: list[Part] = []
        while self._held and getattr(self, f"_{self._state}")(parts):
            pass
        return [(kind, piece) for kind, piece in parts if piece]

    def finish(self) -> list[Part]:
        held, self._held = self._held, ""
        parts: list[Part] = []
        if self._state in ("opening", "outside"):
            self._plain(held, parts)
        elif self._state == "body" and self._kind is not None:
            parts.append((self._kind, held))
        # An unfinished header says nothing yet: it is dropped.
        return [(kind, piece) for kind, piece in parts if piece]

    def _opening(self, parts: list[Part]) -> bool:
        """The prompt ended `<|start|>assistant`: the reply opens with a channel, or with the
        recipient (` to=functions.NAME<|channel|>…`), or (a badly behaved quant) with text."""
        head = self._held.lstrip()
        openers = (*OPENS, "to=")
        if not head or any(o.startswith(head) and o != head for o in openers):
            return False  # cannot tell yet
        self._state = "header" if head.startswith(openers) else "outside"
        return True

    def _outside(self, parts: list[Part]) -> bool:
        hit = first_marker(self._held, ENDS + OPENS)
        cut = hit[0] if hit else len(self._held) - held_back(self._held, ENDS + OPENS)
        text, self._held = self._held[:cut], self._held[cut:]
        self._plain(text, parts)
        if hit is None:
            return False
        if hit[1] in ENDS:  # a stray end marker
            self._held = self._held[len(hit[1]) :]
        else:
            self._state = "header"
        return True

    def _plain(self, text: str, parts: list[Part]) -> None:
        if self._after_message:
            text = text.lstrip()
            self._after_message = not text
        parts.append(("content", text))

    def _header(self, parts: list[Part]) -> bool:
        found = self._held.find(MESSAGE)
        if found < 0:
            return False  # the header is still being written
        header = self._held[:found]
        self._held = self._held[found + len(MESSAGE) :]
        self._kind = parse_header(header).kind
        if self._kind == "calls":
            parts.append(("calls", header + MESSAGE))
        self._state = "body"
        return True

    def _body(self, parts: list[Part]) -> bool:
        """A body runs to an end marker, or to the next header when the model skipped it."""
        hit = first_marker(self._held, ENDS + OPENS)
        cut = hit[0] if hit else len(self._held) - held_back(self._held, ENDS + OPENS)
        text, self._held = self._held[:cut], self._held[cut:]
        if self._kind is not None:
            parts.append((self._kind, text))
        if hit is None:
            return False
        marker = hit[1]
        if self._kind == "calls":  # the syntax ends the call on it
            parts.append(("calls", marker if marker in ENDS else CALL))
        if marker in ENDS:
            self._held = self._held[len(marker) :]
            self._state = "outside"
        else:
            self._state = "header"
        self._after_message = True
        return True


class HarmonyAdapter(FamilyAdapter):
    name = "harmony"
    label = "gpt-oss (harmony channels; <|return|> and <|call|> end a reply)"
    builtin_stop_tokens: ClassVar[tuple[str, ...]] = ("<|return|>", "<|call|>", "<|endoftext|>")
    default_tool_syntax = "harmony"
    # The template's `reasoning_effort` and the values it takes (serving/thinking.py maps a
    # request's effort onto them).
    effort_levels: ClassVar[tuple[str, ...]] = ("low", "medium", "high")

    def reply_reader(self, thinking: Thinking | None) -> ReplyReader | None:
        return HarmonyReader()

    def render_prompt(
        self,
        tokenizer: Tokenizer,
        messages: list[dict],
        tools: list[dict] | None = None,
        template_kwargs: dict[str, Any] | None = None,
        prefill: str = "",
        generation_prompt: bool = True,
    ) -> list[int]:
        # The template writes every function's description, and fails on a tool without one
        # (Anthropic's tools often have none).
        described = [_with_description(tool) for tool in tools] if tools else tools
        return super().render_prompt(
            tokenizer, messages, described, template_kwargs, prefill, generation_prompt
        )

    def prepare_messages(self, messages: list[dict]) -> list[dict]:
        """Thinking passed back as `thinking` (which the template renders before a call), text
        for content lists (the template adds strings), one call per assistant message."""
        prepared = [_harmony_message(m) for m in messages]
        return _one_call_each(prepared)


def _with_description(tool: dict) -> dict:
    function = tool.get("function")
    if not isinstance(function, dict) or "description" in function:
        return tool
    return {**tool, "function": {**function, "description": ""}}


def _harmony_message(message: dict) -> dict:
    out = {k: v for k, v in message.items() if k not in ("reasoning_content", "reasoning")}
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = "".join(
            p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    elif content is None:
        out["content"] = ""  # the template tests `in message.content`, which None fails
    if message["role"] != "assistant":
        return out
    thinking = _reasoning_of(message)
    if thinking:
        out["thinking"] = thinking
        if out.get("tool_calls"):
            # The template raises on a call with both; the thinking is what led to the call.
            out.pop("content", None)
    return out


def _reasoning_of(message: dict) -> str:
    for key in ("thinking", "reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _one_call_each(messages: list[dict]) -> list[dict]:
    """The template renders an assistant message's first call only, and names a tool result
    after the call before it: parallel calls become one assistant message each, followed by
    its own result (matched by id, else by order)."""
    out: list[dict] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        calls = message.get("tool_calls") or []
        if message["role"] != "assistant" or len(calls) < 2:
            out.append(message)
            i += 1
            continue
        j = i + 1
        while j < len(messages) and messages[j]["role"] == "tool":
            j += 1
        out.extend(_interleaved(message, calls, messages[i + 1 : j]))
        i = j
    return out


def _interleaved(message: dict, calls: list[dict], results: list[dict]) -> list[dict]:
    left = list(results)
    ids = {call.get("id") for call in calls}
    out: list[dict] = []
    for n, call in enumerate(calls):
        one: dict[str, Any] = {**message, "tool_calls": [call]}
        if n:  # the thinking and any text belong before the first call
            one.pop("thinking", None)
            one["content"] = ""
        out.append(one)
        match = next((r for r in left if r.get("tool_call_id") == call.get("id")), None)
        if match is None:  # a result whose id names none of the calls goes by order
            match = next((r for r in left if r.get("tool_call_id") not in ids), None)
        if match is not None:
            left.remove(match)
            out.append(match)
    return out + left
