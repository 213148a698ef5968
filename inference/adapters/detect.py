"""Which model family a model is, read off the model itself: its chat template's text, else
its tokenizer's special tokens.

A template is the surest sign a model gives of how it is prompted and how it writes tool calls
and thinking: two fine-tunes of one base share its template, and a family's new release often
changes only its template. Each fingerprint below names text that the family's real template
(llama.cpp's models/templates, the models' own repositories) writes and that others' do not;
they are tried in order, the most specific first. A few only tell the prompt format (ChatML,
Llama 3 headers) and not the model: those are `generic`, and a model's name may know better."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SLUGS", "Detection", "detect"]


@dataclass(frozen=True)
class Detection:
    slug: str  # a ModelFamily slug the seeding migrations create
    reason: str  # what in the model told, for people ("chat template writes …")
    generic: bool = False  # only the prompt format: a name pattern may know the model better


@dataclass(frozen=True)
class _Print:
    slug: str
    reason: str
    needs: tuple[str | re.Pattern[str], ...]  # all of these occur in the template
    unless: tuple[str, ...] = ()  # and none of these
    generic: bool = False

    def matches(self, template: str) -> bool:
        if any(text in template for text in self.unless):
            return False
        return all(
            (need.search(template) if isinstance(need, re.Pattern) else need in template)
            for need in self.needs
        )


# DeepSeek's markers bar with a fullwidth U+FF5C and space with U+2581 (written so, as the
# plain characters read as the ASCII ones).
_BAR, _SP = "\uff5c", "\u2581"
_ASSISTANT = f"<{_BAR}Assistant{_BAR}>"
_DSML = f"{_BAR}DSML{_BAR}"
_CALLS_BEGIN = f"<{_BAR}tool{_SP}calls{_SP}begin{_BAR}>"
# Hermes's JSON call, as the templates that prompt for it write it (Qwen 2.5, QwQ, Qwen3).
_HERMES_JSON = "<tool_call></tool_call> XML tags"
# A template that opens the thinking in the generation prompt (QwQ), with its escaped newlines.
_OPENS_THINK = re.compile(r"<\|im_start\|>assistant(\\n|\n)<think>")

_TEMPLATE_PRINTS: tuple[_Print, ...] = (
    # llm-jp's harmony dialect shares <|channel|> but not gpt-oss's spacing.
    _Print(
        "gpt-oss",
        "chat template writes <|channel|> messages (gpt-oss harmony)",
        ("<|channel|>",),
        unless=("chat_format=llm-jp-harmony",),
    ),
    _Print(
        "kimi-k3",
        "chat template writes <|open|>…<|close|> tags and <|end_of_msg|> (Kimi K3)",
        ("<|open|>", "<|close|>", "<|end_of_msg|>"),
    ),
    _Print(
        "kimi-k2-thinking",
        "chat template writes <|tool_calls_section_begin|> and <think> (Kimi K2 Thinking)",
        ("<|tool_calls_section_begin|>", "<think>"),
    ),
    _Print(
        "kimi-k2",
        "chat template writes <|tool_calls_section_begin|> (Kimi K2)",
        ("<|tool_calls_section_begin|>",),
    ),
    _Print(
        "deepseek-v3-2",
        f"chat template writes {_DSML} tool calls (DeepSeek V3.2 / V4)",
        ("dsml_token", _DSML),
    ),
    # V3.1 closes the thinking in the prompt unless its `thinking` variable is set; R1 opens it.
    _Print(
        "deepseek-v3",
        f"chat template writes {_ASSISTANT} and switches <think> with `thinking` (DeepSeek V3.1)",
        (_ASSISTANT, "<think></think>", "thinking"),
    ),
    _Print(
        "deepseek-r1",
        f"chat template opens <think> after {_ASSISTANT} (DeepSeek-R1 and its distills)",
        (f"{_ASSISTANT}<think>",),
    ),
    _Print(
        "minimax-m2",
        "chat template writes <minimax:tool_call> (MiniMax M2)",
        ("<minimax:tool_call>",),
    ),
    # GLM-4.7 opens <think> in the prompt (and keeps past thinking with clear_thinking).
    _Print(
        "glm-4-7",
        "chat template writes <arg_key>/<arg_value> calls and clear_thinking (GLM-4.7)",
        ("<|assistant|>", "<arg_key>", "clear_thinking"),
    ),
    _Print(
        "glm-4-5",
        "chat template writes <tool_call>name<arg_key>…<arg_value> calls (GLM-4.5 / 4.6)",
        ("<|assistant|>", "<arg_key>", "<arg_value>"),
    ),
    _Print(
        "gemma4",
        "chat template writes <|tool_call>call: and <|turn> (Gemma 4)",
        ("<|tool_call>call:",),
    ),
    _Print(
        "nemotron3-nano",
        "chat template writes <function=…><parameter=…> calls and truncate_history_thinking "
        "(Nemotron 3 Nano)",
        ("<tool_call>", "<function=", "<parameter=", "truncate_history_thinking"),
    ),
    _Print(
        "qwen3-5",
        "chat template writes <function=…><parameter=…> calls and opens <think> with "
        "enable_thinking (Qwen3.5)",
        ("<tool_call>", "<function=", "<parameter=", "<think>", "enable_thinking"),
    ),
    _Print(
        "qwen3-coder",
        "chat template writes <function=…><parameter=…> calls without thinking (Qwen3-Coder XML)",
        ("<tool_call>", "<function=", "<parameter="),
        unless=("<think>",),
    ),
    _Print(
        "smollm3",
        "chat template writes 'Reasoning Mode: /think' and /no_think (SmolLM3)",
        ("Reasoning Mode: ", "/no_think", "enable_thinking"),
    ),
    _Print(
        "nemotron-nano-v2",
        "chat template writes <TOOLCALL>[…] and /think, /no_think (Nemotron Nano v2)",
        ("<TOOLCALL>", "<SPECIAL_11>"),
    ),
    # Cohere2 MoE writes <|START_TEXT|> answers, another format than R7B's.
    _Print(
        "command-r",
        "chat template writes <|START_ACTION|> calls (Command R7B)",
        ("<|START_OF_TURN_TOKEN|>", "<|START_ACTION|>"),
        unless=("<|START_TEXT|>",),
    ),
    _Print(
        "magistral",
        "chat template writes [THINK]…[/THINK] and [TOOL_CALLS] (Magistral / Ministral 3 "
        "reasoning)",
        ("[THINK]", "[TOOL_CALLS]"),
    ),
    _Print(
        "mistral",
        "chat template writes [TOOL_CALLS] (Mistral Small, Devstral, Nemo)",
        ("[INST]", "[TOOL_CALLS]"),
    ),
    _Print(
        "granite3",
        "chat template writes <|tool_call|> and <|start_of_role|> (Granite 3)",
        ("<|start_of_role|>", "<|tool_call|>"),
    ),
    _Print(
        "granite",
        "chat template writes <tool_call> and <|start_of_role|> (Granite 4)",
        ("<|start_of_role|>", "<tool_call>"),
    ),
    _Print(
        "llama4",
        "chat template writes <|header_start|> and <|eot|> (Llama 4)",
        ("<|header_start|>", "<|eot|>"),
    ),
    _Print(
        "hermes",
        "chat template prompts 'You are a function calling AI model' with <tool_call> "
        "(Hermes 2 / 3)",
        ("You are a function calling AI model", "<tool_call>"),
    ),
    _Print(
        "qwq",
        "chat template opens <think> after <|im_start|>assistant with Hermes <tool_call> JSON "
        "(QwQ)",
        (_OPENS_THINK, _HERMES_JSON),
    ),
    _Print(
        "qwen3",
        "chat template writes Hermes <tool_call> JSON and switches <think> with "
        "enable_thinking (Qwen3)",
        ("<|im_start|>", _HERMES_JSON, "<think>", "enable_thinking"),
    ),
    _Print(
        "chatml",
        "chat template writes Hermes <tool_call> JSON as Qwen 2.5 (You are Qwen)",
        ("<|im_start|>", _HERMES_JSON, "You are Qwen"),
    ),
    # Meta's own Llama 3.x templates; fine-tunes that write <function= (functionary) differ.
    _Print(
        "llama",
        "chat template writes <|start_header_id|> with Meta's 'Cutting Knowledge Date' (Llama 3.x)",
        ("<|start_header_id|>", "Cutting Knowledge Date"),
        unless=("<function=",),
    ),
    _Print(
        "gemma",
        "chat template writes <start_of_turn> (Gemma 2 / 3)",
        ("<start_of_turn>",),
    ),
    # Prompt formats only: the model is one of many that share them.
    _Print("chatml", "chat template writes <|im_start|> (ChatML)", ("<|im_start|>",), generic=True),
    _Print(
        "llama",
        "chat template writes <|start_header_id|> (Llama 3 format)",
        ("<|start_header_id|>",),
        generic=True,
    ),
    _Print("mistral", "chat template writes [INST] (Mistral format)", ("[INST]",), generic=True),
    _Print(
        "command-r",
        "chat template writes <|START_OF_TURN_TOKEN|> (Command R format)",
        ("<|START_OF_TURN_TOKEN|>",),
        generic=True,
    ),
)

# Special tokens, for a model whose template is missing or tells nothing: (token, slug,
# family, generic). Tokens a whole vocabulary shares (DeepSeek V3's, Kimi K2's) cannot tell a
# thinking variant from its base, so they are generic.
_TOKEN_PRINTS: tuple[tuple[str, str, str, bool], ...] = (
    ("<|channel|>", "gpt-oss", "gpt-oss harmony", False),
    ("<minimax:tool_call>", "minimax-m2", "MiniMax M2", False),
    ("<|tool_call>", "gemma4", "Gemma 4", False),
    ("<|tool_calls_section_begin|>", "kimi-k2", "Kimi K2", True),
    (_CALLS_BEGIN, "deepseek-v3", "DeepSeek V3", True),
    ("[TOOL_CALLS]", "mistral", "Mistral", True),
    ("<|python_tag|>", "llama", "Llama 3", True),
    ("<|header_start|>", "llama4", "Llama 4", False),
    ("<start_of_turn>", "gemma", "Gemma", True),
    ("<|START_ACTION|>", "command-r", "Command R7B", True),
    ("<|im_start|>", "chatml", "ChatML", True),
)

# Every family detection can name: the seeding migrations must give each a row.
SLUGS = frozenset(p.slug for p in _TEMPLATE_PRINTS) | {t[1] for t in _TOKEN_PRINTS}


def detect(chat_template: str | None, special_tokens: Iterable[str]) -> Detection | None:
    """The family the template (else the special tokens) shows, or None when nothing tells.
    `special_tokens` is read only when the template decides nothing (it may be lazy)."""
    if chat_template:
        for found in _TEMPLATE_PRINTS:
            if found.matches(chat_template):
                return Detection(found.slug, found.reason, found.generic)
    specials = set(special_tokens)
    for token, slug, family, generic in _TOKEN_PRINTS:
        if token in specials:
            return Detection(slug, f"tokenizer has the special token {token} ({family})", generic)
    return None
