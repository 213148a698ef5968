"""Reasoning models: whether a request thinks, what the chat template is told, and how the
reply parser finds the thinking in the text."""

from __future__ import annotations

from dataclasses import dataclass

from inference.adapters import FamilyAdapter
from inference.adapters.reasoning import Thinking

__all__ = ["Thinking", "ThinkingPlan", "plan_thinking", "template_effort"]

# Efforts from least to most, as the dialects name them (chat's reasoning_effort, Responses'
# reasoning.effort); a family's template takes some of them.
EFFORT_SCALE = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
# Messages asks for a thinking budget in tokens: the effort each budget stands for (below).
BUDGET_EFFORTS = ((4096, "low"), (16384, "medium"))
EFFORT_VARIABLE = "reasoning_effort"


@dataclass(frozen=True)
class ThinkingPlan:
    template_kwargs: dict
    thinking: Thinking | None  # None: the family does not reason; the text is left alone


def plan_thinking(
    adapter: FamilyAdapter,
    enabled: bool | None,
    *,
    constrained: bool = False,
    effort: str | None = None,
    budget: int | None = None,
) -> ThinkingPlan:
    """`enabled` is what the request asked (None: the model's own default); `effort` the effort
    it named, or `budget` its thinking budget in tokens. A constrained reply (JSON schema,
    forced tool call) cannot think first: its grammar starts at once."""
    profile = adapter.profile
    kwargs = _effort_kwargs(adapter, enabled, effort, budget)
    if not profile.reasons:
        return ThinkingPlan(kwargs, None)
    if constrained:
        enabled = False
    if enabled is None and not profile.thinking_by_default and profile.thinking_switch:
        enabled = False  # said outright: a tokenizer wrapper may guess otherwise (mlx-lm does)
    if profile.thinking_switch and enabled is not None:
        kwargs[profile.thinking_switch] = enabled
    # Switched off, the template closes (or never opens) the thinking: the reply starts outside.
    opened = profile.reasoning_in_prompt and enabled is not False
    if enabled is False and not profile.thinking_switch:
        opened = profile.reasoning_in_prompt  # nothing can switch it off; the prompt still opens it
    return ThinkingPlan(kwargs, Thinking(profile.reasoning_start, profile.reasoning_end, opened))


def _effort_kwargs(
    adapter: FamilyAdapter, enabled: bool | None, effort: str | None, budget: int | None
) -> dict:
    """`reasoning_effort` for a family whose template reads it (gpt-oss: low, medium, high).
    Left out when the request said nothing, so the template's default holds; and not lowered
    for a constrained reply, so the prompt (and its cached prefix) stays the same."""
    levels: tuple[str, ...] = getattr(adapter, "effort_levels", ())
    if not levels:
        return {}
    level = template_effort(levels, effort, enabled, budget)
    return {EFFORT_VARIABLE: level} if level else {}


def template_effort(
    levels: tuple[str, ...], effort: str | None, enabled: bool | None, budget: int | None
) -> str | None:
    """The level of `levels` nearest what the request asked: its effort by name, else its
    budget, else thinking switched off (the least there is); None when it asked nothing."""
    if effort is None and budget is not None:
        effort = next((name for limit, name in BUDGET_EFFORTS if budget < limit), "high")
    if effort is None and enabled is False:
        effort = "none"
    if effort not in EFFORT_SCALE:
        return None
    rank = EFFORT_SCALE.index(effort)
    known = sorted((EFFORT_SCALE.index(level), level) for level in levels if level in EFFORT_SCALE)
    if not known:
        return None
    # The nearest level; between two as near, the lesser (min keeps the first).
    return min(known, key=lambda ranked: abs(ranked[0] - rank))[1]
