"""Scripted models that write each family's own tool call, behind that family's real chat
template (llama.cpp's `models/templates/`), for the live server: the catalog finds the family
from the template, and the reply parser must read the call in every dialect.

Each model is tests/support/scripted.py's construction: SmolLM2's tokenizer plus one added token per
piece of the script (markers arrive whole or split, arguments over several tokens), layers
that add nothing, so the prompt's last token (the template's generation prompt) starts the
script and each piece is followed by the next, then the end of turn."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.support.scripted import END, WEATHER_TOOL, ids, save_chained_model, scripted_tokenizer

ARGUMENTS = {"city": "Paris", "days": 3}
CONTEXT = 8192
REASONING = "The user wants the weather."


@dataclass(frozen=True)
class FamilyScript:
    template: str  # file in llama.cpp's models/templates/
    pieces: tuple[str, ...]  # what the model writes, token by token
    reasoning: int = 0  # how many pieces of reasoning open the script (REASONING)


THINK_TOKENS = ("<think>", "</think>")
THINK_CLOSED = ("The user wants", " the weather.", "\n</think>\n\n")

SCRIPTS: dict[str, FamilyScript] = {
    "qwen35-scripted": FamilyScript(
        "Qwen3.5-4B.jinja",
        (
            *THINK_CLOSED,
            "<tool_call>",
            "\n<function=get_weather>",
            "\n<parameter=city>",
            "\nPar",
            "is\n</param",
            "eter>\n<parameter=days>\n",
            "3\n</parameter>",
            "\n</function>\n</tool_call>",
        ),
        reasoning=3,
    ),
    "glm47-scripted": FamilyScript(
        "GLM-4.7-Flash.jinja",
        (
            "The user wants",
            " the weather.",
            "</think>",
            "<tool_call>get_weather",
            "<arg_key>city</arg_key>",
            "<arg_value>Par",
            "is</arg_value>",
            "<arg_key>days</arg_key><arg_value>3</arg_value>",
            "</tool_call>",
        ),
        reasoning=3,
    ),
    "gpt-oss-scripted": FamilyScript(
        "openai-gpt-oss-120b.jinja",
        (
            "<|channel|>analysis<|message|>",
            "The user wants",
            " the weather.",
            "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather",
            " <|constrain|>json<|message|>",
            '{"city": "Par',
            'is", "days": 3}',
        ),
        reasoning=3,
    ),
    "deepseek-scripted": FamilyScript(
        "deepseek-ai-DeepSeek-V3.1.jinja",
        (
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>",
            '{"city": "Par',
            'is", "days": 3}',
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        ),
    ),
    "kimi-scripted": FamilyScript(
        "moonshotai-Kimi-K2.jinja",
        (
            "<|tool_calls_section_begin|>",
            "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>",
            '{"city": "Par',
            'is", "days": 3}',
            "<|tool_call_end|><|tool_calls_section_end|>",
        ),
    ),
    "minimax-scripted": FamilyScript(
        "MiniMax-M2.jinja",
        (
            *THINK_CLOSED,
            "<minimax:tool_call>",
            '\n<invoke name="get_weather">',
            '\n<parameter name="city">Par',
            "is</parameter>",
            '\n<parameter name="days">3</parameter>',
            "\n</invoke>\n</minimax:tool_call>",
        ),
        reasoning=3,
    ),
    "gemma4-scripted": FamilyScript(
        "google-gemma-4-31B-it.jinja",
        ("<|tool_call>call:get_weather{city:", '<|"|>Par', 'is<|"|>', ",days:3}", "<tool_call|>"),
    ),
    "devstral-scripted": FamilyScript(
        "unsloth-mistral-Devstral-Small-2507.jinja",
        ("[TOOL_CALLS]get_weather", "[ARGS]", '{"city": "Par', 'is", "days": 3}'),
    ),
}


def build_family_model(smollm_dir: Path, template: str, script: FamilyScript, to: Path) -> Path:
    """A scripted model in `to` whose chat template is `template` (the real file's text).
    With thinking switched off (as Messages asks when a request has no `thinking`), the
    template's generation prompt ends elsewhere: from there the script skips its reasoning."""
    # mlx-lm turns thinking on by default only where the vocabulary has <think>, as real
    # reasoning models' vocabularies do.
    vocabulary = [*script.pieces, *(THINK_TOKENS if script.reasoning else ())]
    tokenizer = scripted_tokenizer(smollm_dir, to, vocabulary, {"chat_template": template})
    script_ids = [*ids(tokenizer, script.pieces), tokenizer.token_to_id(END)]
    on, *offs = _generation_prompt_ends(to)
    chains = [[on, *script_ids]]
    chains += [[off, *script_ids[script.reasoning :]] for off in set(offs) - {on}]
    for chain in chains:
        assert len(set(chain)) == len(chain), f"{script.template}: a token repeats in {chain}"
    # Devstral's template alone writes ~1,400 tokens of system prompt.
    save_chained_model(to, chains, tokenizer.get_vocab_size(), max_position_embeddings=CONTEXT)
    return to


def _generation_prompt_ends(folder: Path) -> list[int]:
    """The last token of a prompt as the server renders it (the template's generation prompt),
    by default, then with each thinking switch templates use turned off."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    conversation = [{"role": "user", "content": "What is the weather in Paris?"}]
    ends = []
    for switch in ({}, {"enable_thinking": False}, {"thinking": False}):
        rendered = tokenizer.apply_chat_template(
            conversation, tools=[WEATHER_TOOL], add_generation_prompt=True, **switch
        )
        ends.append(list(getattr(rendered, "input_ids", rendered))[-1])
    return ends


def arguments_of(text: str) -> dict:
    return json.loads(text)
