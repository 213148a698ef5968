from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from jinja2 import TemplateError

from inference.adapters.reasoning import ReasoningSplitter, ReplyReader, Thinking
from inference.adapters.toolcalls import ToolSyntax, syntax_class
from inference.adapters.tools import (
    arguments_value,
    inline_tool_history,
    parameter_schemas,
    stable_order,
    template_supports_tools,
    template_writes_calls,
    tool_system_prompt,
    with_tool_prompt,
)


class Tokenizer(Protocol):
    """The slice of mlx-lm's TokenizerWrapper that adapters use."""

    eos_token_ids: set[int]
    chat_template: str | None

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> Any: ...

    def convert_tokens_to_ids(self, token: str) -> int | None: ...

    def get_vocab(self) -> dict[str, int]: ...

    def encode(self, text: str, **kwargs: Any) -> list[int]: ...


class ChatTemplateMissing(ValueError):
    """The model has no chat template and its family gives none."""


class TemplateRefused(TemplateError):
    """The chat template (or transformers around it) failed on the client's messages: an
    empty conversation, roles out of order, content of a type it cannot handle. Whatever it
    raises there is about the request, so it is one error the request hears as a 400."""


def render_template(tokenizer: Tokenizer, messages: list[dict], **kwargs: Any) -> Any:
    """`tokenizer.apply_chat_template`, its failures on these messages as TemplateRefused."""
    try:
        return tokenizer.apply_chat_template(messages, **kwargs)
    except TemplateError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise TemplateRefused(str(exc) or type(exc).__name__) from exc


@dataclass(frozen=True)
class FamilyProfile:
    """What the catalog says about a family, detached from the ORM."""

    slug: str = "default"
    adapter: str = "default"
    extra_stop_tokens: tuple[str, ...] = ()
    stop_strings: tuple[str, ...] = ()
    chat_template: str = ""
    # Reasoning models: the markers around their thinking, whether the chat template opens
    # the thinking inside the prompt (the reply then starts in it), and the template variable
    # that switches thinking on and off (e.g. Qwen3's enable_thinking).
    reasoning_start: str = ""
    reasoning_end: str = ""
    reasoning_in_prompt: bool = False
    thinking_switch: str = ""
    # Whether the family thinks when a request does not say (DeepSeek V3.1 thinks only when
    # asked: its template opens the thinking in the prompt then).
    thinking_by_default: bool = True
    # How the family writes tool calls (a name in toolcalls.registry); empty: the adapter's.
    tool_syntax: str = ""

    @property
    def reasons(self) -> bool:
        return bool(self.reasoning_start and self.reasoning_end)


@dataclass
class FamilyAdapter:
    """Default behaviour: the tokenizer's chat template, eos plus the family's stop tokens."""

    profile: FamilyProfile = field(default_factory=FamilyProfile)

    name: ClassVar[str] = "default"
    label: ClassVar[str] = "Default (tokenizer's chat template)"
    # Stop tokens the family always has, on top of what the catalog row adds.
    builtin_stop_tokens: ClassVar[tuple[str, ...]] = ()

    def stop_token_ids(
        self, tokenizer: Tokenizer, vocab: Mapping[str, int] | None = None
    ) -> frozenset[int]:
        """`vocab`: the tokenizer's, when the caller keeps it (building it costs more than
        rendering a prompt)."""
        vocab = tokenizer.get_vocab() if vocab is None else vocab
        names = (*self.builtin_stop_tokens, *self.profile.extra_stop_tokens)
        # A token the vocabulary lacks cannot be generated, so it cannot need stopping on.
        extra = {vocab[name] for name in names if name in vocab}
        return frozenset(set(tokenizer.eos_token_ids) | extra)

    def stop_strings(self) -> tuple[str, ...]:
        return self.profile.stop_strings

    # How the family writes tool calls when its row names no syntax; Hermes's is also what we
    # prompt for when a template has no tool support of its own.
    default_tool_syntax: ClassVar[str] = "hermes"

    def tool_syntax(self, schemas: dict[str, dict] | None = None) -> ToolSyntax:
        """A fresh reader (and grammar writer) of this family's tool calls; `schemas` (each
        offered function's parameters, by name) types arguments written as text."""
        return syntax_class(self.profile.tool_syntax or self.default_tool_syntax)(schemas)

    def reply_reader(self, thinking: Thinking | None) -> ReplyReader | None:
        """What splits reasoning from the rest of a reply (None: nothing to split)."""
        if thinking is None:
            return None
        return ReasoningSplitter(thinking.start, thinking.end, thinking.opened)

    def prepare_messages(self, messages: list[dict]) -> list[dict]:
        return messages

    def render_prompt(
        self,
        tokenizer: Tokenizer,
        messages: list[dict],
        tools: list[dict] | None = None,
        template_kwargs: dict[str, Any] | None = None,
        prefill: str = "",
        generation_prompt: bool = True,
    ) -> list[int]:
        template = self.profile.chat_template or None
        effective = template or tokenizer.chat_template
        if not effective:
            raise ChatTemplateMissing(
                "this model has no chat template; give its family one in the catalog"
            )
        # A client's template variables never replace the arguments set here.
        extra = {k: v for k, v in (template_kwargs or {}).items() if k not in _RESERVED}
        if template_supports_tools(effective) or template_writes_calls(effective):
            schemas = parameter_schemas(tools)
            messages = [_arguments_as_objects(m, schemas) for m in messages]
            if tools and template_supports_tools(effective):
                extra["tools"] = tools
            elif tools:  # history native, the tools described in the family's own syntax
                example = self.tool_syntax().example
                messages = with_tool_prompt(messages, tool_system_prompt(tools, example))
        elif tools or any(m["role"] == "tool" or m.get("tool_calls") for m in messages):
            messages = inline_tool_history(messages, tools or [])
        messages = place_system_turns(messages, takes_late_system(tokenizer, template, effective))
        tokens = render_template(
            tokenizer,
            self.prepare_messages(messages),
            chat_template=template,
            add_generation_prompt=generation_prompt,
            tokenize=True,
            **extra,
        )
        # transformers 5 returns a BatchEncoding where 4 returned a list.
        if hasattr(tokens, "input_ids"):
            tokens = tokens.input_ids
        # A prefilled reply: the assistant's turn is open and already starts with this text.
        if prefill:
            return [*tokens, *tokenizer.encode(prefill, add_special_tokens=False)]
        return list(tokens)


_RESERVED = frozenset(
    {
        "conversation",
        "messages",
        "tools",
        "chat_template",
        "add_generation_prompt",
        "tokenize",
        "documents",
        "continue_final_message",
        "return_dict",
        "return_tensors",
        "padding",
        "truncation",
        "max_length",
        "tokenizer_kwargs",
    }
)


def _arguments_as_objects(message: dict, schemas: dict[str, dict]) -> dict:
    """Templates expect tool-call arguments as objects; OpenAI sends JSON strings. Their keys
    are put in a stable order (the tool schema's, then the rest sorted), so a client that
    reorders them between turns does not change the prompt, and the prefix cache holds."""
    if not message.get("tool_calls"):
        return message
    calls = []
    for call in message["tool_calls"]:
        schema = schemas.get(call["function"].get("name", ""))
        arguments = stable_order(arguments_value(call), schema)
        calls.append({**call, "function": {**call["function"], "arguments": arguments}})
    return {**message, "tool_calls": calls}


# Rendered as a late system turn by templates that take one; its absence means they dropped it.
_PROBE_MARK = "late-system-probe-7f3a"
_LATE_SYSTEM: dict[str, bool] = {}  # effective template -> whether it renders a late system


def takes_late_system(tokenizer: Tokenizer, template: str | None, effective: str) -> bool:
    """Whether the template renders a system turn between other turns (ChatML, Llama 3 do;
    Mistral's and Gemma's raise, some drop it): found once per template by rendering a probe."""
    known = _LATE_SYSTEM.get(effective)
    if known is None:
        probe = [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
            {"role": "system", "content": _PROBE_MARK},
            {"role": "user", "content": "v"},
        ]
        try:
            text = tokenizer.apply_chat_template(
                probe, chat_template=template, add_generation_prompt=True, tokenize=False
            )
            known = _PROBE_MARK in str(text)
        except Exception:  # the template refused it: any error of its own
            known = False
        _LATE_SYSTEM[effective] = known
    return known


def place_system_turns(messages: list[dict], late_ok: bool) -> list[dict]:
    """System messages after the first (Claude Code's reminders between turns, a client's
    mid-conversation instructions): kept in place where the template renders them, otherwise
    folded into the next user turn (the previous one when none follows). Leading system
    messages become one."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    head = messages[:lead]
    if len(head) > 1:
        head = [{"role": "system", "content": "\n\n".join(_text(m) for m in head)}]
    rest = [dict(m) for m in messages[lead:]]
    if late_ok or not any(m["role"] == "system" for m in rest):
        return head + rest
    out: list[dict] = []
    pending: list[str] = []
    for message in rest:
        if message["role"] == "system":
            pending.append(_text(message))
            continue
        if message["role"] == "user" and pending:
            message["content"] = _prefixed("\n\n".join(pending), message["content"])
            pending = []
        out.append(message)
    if pending:
        users = [m for m in out if m["role"] == "user"]
        if users:
            users[-1]["content"] = _suffixed(users[-1]["content"], "\n\n".join(pending))
        else:
            out.append({"role": "user", "content": "\n\n".join(pending)})
    return head + out


def _text(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content


def _prefixed(text: str, content: str | list) -> str | list:
    if isinstance(content, list):
        return [{"type": "text", "text": text + "\n\n"}, *content]
    return f"{text}\n\n{content}"


def _suffixed(content: str | list, text: str) -> str | list:
    if isinstance(content, list):
        return [*content, {"type": "text", "text": "\n\n" + text}]
    return f"{content}\n\n{text}"


def fold_system_into_first_user(messages: list[dict]) -> list[dict]:
    """For templates that reject the system role: prepend it to the first user turn."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    preamble = "\n\n".join(system)
    for message in rest:
        if message["role"] == "user":
            message["content"] = f"{preamble}\n\n{message['content']}"
            return rest
    return [{"role": "user", "content": preamble}, *rest]
