"""Reasoning models: whether a request thinks, what the chat template is told, and how the
reply parser finds the thinking in the text."""

from __future__ import annotations

from dataclasses import dataclass

from inference.adapters import FamilyAdapter
from inference.adapters.reasoning import Thinking

__all__ = ["Thinking", "ThinkingPlan", "plan_thinking"]


@dataclass(frozen=True)
class ThinkingPlan:
    template_kwargs: dict
    thinking: Thinking | None  # None: the family does not reason; the text is left alone


def plan_thinking(
    adapter: FamilyAdapter, enabled: bool | None, *, constrained: bool = False
) -> ThinkingPlan:
    """`enabled` is what the request asked (None: the model's own default). A constrained
    reply (JSON schema, forced tool call) cannot think first: its grammar starts at once."""
    profile = adapter.profile
    if not profile.reasons:
        return ThinkingPlan({}, None)
    if constrained:
        enabled = False
    kwargs = {}
    if profile.thinking_switch and enabled is not None:
        kwargs[profile.thinking_switch] = enabled
    # Switched off, the template closes (or never opens) the thinking: the reply starts outside.
    opened = profile.reasoning_in_prompt and enabled is not False
    if enabled is False and not profile.thinking_switch:
        opened = profile.reasoning_in_prompt  # nothing can switch it off; the prompt still opens it
    return ThinkingPlan(kwargs, Thinking(profile.reasoning_start, profile.reasoning_end, opened))
