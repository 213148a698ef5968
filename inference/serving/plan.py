"""A request as every dialect asks it. Each dialect's plan builder maps its body into one Plan:
the conversation as chat templates read it, the tools offered and how a reply must use them, a
JSON format asked for, thinking, sampling. What is true of every plan is decided here, once:
the message cap, the catalog's system prompt, the grammar a reply decodes under, thinking."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings

from inference.adapters import FamilyAdapter
from inference.engine.types import TokenPrompt
from inference.protocol.errors import APIError
from inference.serving.images import ImageSource
from inference.serving.prompts import ChatPrompt, TextPrompt
from inference.serving.resolve import ResolvedModel
from inference.serving.sampling import SamplingAsk
from inference.serving.structured import json_grammar
from inference.serving.thinking import ThinkingPlan, plan_thinking
from inference.serving.tooluse import ToolUse


@dataclass(frozen=True)
class ThinkingAsk:
    enabled: bool | None = None  # None: the model's own default
    effort: str | None = None  # by name (chat's reasoning_effort, Responses' reasoning.effort)
    budget: int | None = None  # in tokens (Messages' budget_tokens)


@dataclass(frozen=True)
class JSONFormat:
    """A reply asked to be JSON: its schema, and where the request gave it (named in a 400)."""

    schema: dict
    param: str


@dataclass(frozen=True)
class Plan:
    """What a request asks, in no dialect's words."""

    # The conversation as chat templates read it (OpenAI chat's message shape), without the
    # catalog's system prompt; `messages_param` names where the client wrote it.
    messages: list[dict] = field(default_factory=list)
    messages_param: str = "messages"
    sampling: SamplingAsk = field(default_factory=SamplingAsk)
    tool_use: ToolUse = field(default_factory=ToolUse)
    json_format: JSONFormat | None = None
    thinking: ThinkingAsk = field(default_factory=ThinkingAsk)
    template_kwargs: dict = field(default_factory=dict)  # the client's own (chat's)
    prefill: str = ""  # text the reply starts with (Messages' last assistant turn)
    images: tuple[ImageSource, ...] = ()  # in the order of the messages' image placeholders
    # Legacy completions: prompts sent as they are, no template; `messages` stays empty.
    raw_prompts: tuple[TextPrompt | TokenPrompt, ...] = ()
    n: int = 1  # choices per prompt
    echo: bool = False
    # What the dialect's reply writer needs from its builder and nobody else reads (Responses:
    # the request's input items, as they are stored with the response).
    kept: object = None


def check_messages(plan: Plan) -> None:
    """One cap, one error, whichever dialect the conversation came in."""
    if len(plan.messages) > settings.MAX_MESSAGES:
        raise APIError(
            f"Too many messages: {len(plan.messages)}; this server takes at most "
            f"{settings.MAX_MESSAGES} (MAX_MESSAGES).",
            param=plan.messages_param,
            code="too_many_messages",
        )


def with_system_prompt(messages: list[dict], system_prompt: str) -> list[dict]:
    """The catalog's system prompt leads a conversation that has no system message."""
    if system_prompt and not any(m["role"] == "system" for m in messages):
        return [{"role": "system", "content": system_prompt}, *messages]
    return messages


def plan_grammar(plan: Plan, adapter: FamilyAdapter) -> str | None:
    """A forced or required call's grammar, in the family's own syntax; else the JSON format's;
    None for a free reply."""
    grammar = plan.tool_use.grammar(adapter.tool_syntax())
    if grammar is None and plan.json_format is not None:
        grammar = json_grammar(plan.json_format.schema, plan.json_format.param)
    return grammar


def thinking_of(plan: Plan, adapter: FamilyAdapter, grammar: str | None) -> ThinkingPlan:
    ask = plan.thinking
    return plan_thinking(
        adapter,
        ask.enabled,
        constrained=grammar is not None,
        effort=ask.effort,
        budget=ask.budget,
    )


def chat_prompt(
    plan: Plan, resolved: ResolvedModel, thinking: ThinkingPlan, images: tuple = ()
) -> ChatPrompt:
    """The prompt every chat dialect hands the engine for its plan."""
    kwargs = {**plan.template_kwargs, **thinking.template_kwargs}
    prompt = ChatPrompt(
        with_system_prompt(plan.messages, resolved.entry.system_prompt),
        plan.tool_use.template_tools(),
        kwargs or None,
        prefill=plan.prefill,
        images=images,
    )
    return resolved.chat_prompt(prompt)
