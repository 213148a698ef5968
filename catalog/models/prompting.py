"""How a model is prompted: its family (adapter, stops, reasoning markers, tool syntax) and the
system-prompt lines left out of every prompt."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import models

from catalog.validators import validate_regex_list, validate_string_list

# Migrations name these choices by their path (inference.adapters.registry.adapter_choices,
# ...toolcalls.registry.syntax_choices): the fields must keep those very callables.
from inference.adapters import FamilyProfile, adapter_choices
from inference.adapters.toolcalls import syntax_choices


class ModelFamily(models.Model):
    """How a family of models is prompted and stopped; picked per model or detected."""

    slug = models.SlugField(
        unique=True,
        help_text="The family's short name, as commands take it (import_gguf --family qwen3).",
    )
    name = models.CharField(max_length=100, help_text="The family's name as the admin lists it.")
    adapter = models.CharField(
        "prompt adapter",
        max_length=32,
        choices=adapter_choices,
        default="default",
        help_text="The code that turns a request into this family's prompt and reads its "
        "replies (roles, tool calls, reasoning): ChatML, Llama 3, Mistral, Gemma, Harmony "
        "(gpt-oss), or default (the chat template alone). Not a LoRA adapter: those are "
        "catalog models of source 'LoRA adapter'.",
    )
    priority = models.PositiveIntegerField(
        default=100,
        help_text="Detection tries families in ascending priority: the first whose patterns "
        "match wins.",
    )
    name_patterns = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_regex_list],
        help_text="Case-insensitive regular expressions matched against the model id and "
        "location, e.g. qwen on one line and smollm on the next.",
    )
    model_types = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_string_list],
        help_text="config.json model_type values, e.g. qwen2 on one line and qwen3 on the next.",
    )
    extra_stop_tokens = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_string_list],
        help_text="Special tokens that end generation besides the tokenizer's eos, e.g. "
        "<|im_end|>.",
    )
    stop_strings = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_string_list],
        help_text="Text that ends generation (not included in the output), e.g. <|user|>.",
    )
    chat_template = models.TextField(
        blank=True, help_text="Jinja chat template overriding the tokenizer's (optional)."
    )
    reasoning_start = models.CharField(
        max_length=64,
        blank=True,
        help_text="Reasoning models: the text that opens their thinking, e.g. <think>. "
        "Empty: the family does not reason and replies are left as written.",
    )
    reasoning_end = models.CharField(
        max_length=64, blank=True, help_text="The text that closes the thinking, e.g. </think>."
    )
    reasoning_in_prompt = models.BooleanField(
        "template opens the thinking",
        default=False,
        help_text="The chat template ends the prompt inside the thinking (DeepSeek-R1, "
        "Qwen3 thinking-2507): the reply starts in it, without the opening marker.",
    )
    thinking_switch = models.CharField(
        max_length=64,
        blank=True,
        help_text="The chat-template variable that turns thinking on and off, e.g. "
        "enable_thinking (Qwen3). Empty: thinking cannot be switched off.",
    )
    tool_syntax = models.CharField(
        max_length=32,
        choices=syntax_choices,
        blank=True,
        help_text="How the family writes tool calls (what its chat template shows for a call). "
        "Empty: the adapter's own (Hermes <tool_call> for most).",
    )

    thinking_by_default = models.BooleanField(
        default=True,
        help_text="Whether it thinks when a request does not say. Off (DeepSeek V3.1, V3.2): "
        "the switch is set off unless a request asks for thinking.",
    )

    class Meta:
        ordering = ["priority", "slug"]
        verbose_name_plural = "model families"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        if bool(self.reasoning_start) != bool(self.reasoning_end):
            raise ValidationError("Give both reasoning markers, or neither.")

    def profile(self) -> FamilyProfile:
        return FamilyProfile(
            slug=self.slug,
            adapter=self.adapter,
            extra_stop_tokens=tuple(self.extra_stop_tokens),
            stop_strings=tuple(self.stop_strings),
            chat_template=self.chat_template,
            reasoning_start=self.reasoning_start,
            reasoning_end=self.reasoning_end,
            reasoning_in_prompt=self.reasoning_in_prompt,
            thinking_switch=self.thinking_switch,
            tool_syntax=self.tool_syntax,
            thinking_by_default=self.thinking_by_default,
        )

    def matches_name(self, *names: str) -> bool:
        return self.matching_pattern(*names) is not None

    def matching_pattern(self, *names: str) -> str | None:
        """The first of the name patterns that one of `names` matches."""
        return next(
            (
                pattern
                for pattern in self.name_patterns
                for name in names
                if re.search(pattern, name, re.IGNORECASE)
            ),
            None,
        )


def validate_pattern(value: str) -> None:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValidationError(f"Not a regular expression: {exc}") from None


class PromptMetadataPattern(models.Model):
    """A line clients put in their system prompts that changes from request to request and
    tells the model nothing (Claude Code's billing header): left out of every prompt, so the
    prefix cache matches from the first token. Applies from the next request, no restart."""

    name = models.CharField(max_length=100)
    pattern = models.CharField(
        max_length=500,
        validators=[validate_pattern],
        help_text="A Python regular expression; each line of a system message it matches "
        "(re.search) is left out of the prompt. A message left empty is dropped.",
    )
    enabled = models.BooleanField(default=True)
    notes = models.TextField(blank=True, help_text="Who sends it, and why it may go.")

    class Meta:
        ordering = ["name"]
        verbose_name = "prompt metadata pattern"

    def __str__(self) -> str:
        return self.name
