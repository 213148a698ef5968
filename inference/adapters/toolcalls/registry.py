"""The tool-call syntaxes this build reads, by name (what a family row names), each one class
in its own module, imported when first used."""

from __future__ import annotations

import importlib

from inference.adapters.toolcalls.base import ToolSyntax

# name -> (module in this package, class, what admin shows)
_SYNTAXES: dict[str, tuple[str, str, str]] = {
    "hermes": ("json_calls", "HermesSyntax", 'Hermes: <tool_call>{"name": …, "arguments": …}'),
    "llama3_json": ("json_calls", "Llama3Syntax", 'Llama 3: {"name": …, "parameters": …}'),
    "mistral": ("json_calls", "MistralSyntax", "Mistral: [TOOL_CALLS]name[ARGS]{…}"),
    "granite": ("json_variants", "GraniteSyntax", "Granite 3: <|tool_call|>[{…}]"),
    "nemotron": ("json_variants", "NemotronSyntax", "Nemotron Nano 2: <TOOLCALL>[{…}]"),
    "command_r": (
        "json_variants",
        "CommandRSyntax",
        'Command R7B: <|START_ACTION|>[{"tool_name": …}]',
    ),
    "qwen3_xml": (
        "xml_parameters",
        "QwenXMLSyntax",
        "Qwen3-Coder / Qwen3.5: <tool_call><function=…><parameter=…>",
    ),
    "glm": ("glm", "GLMSyntax", "GLM 4.5+: <tool_call>name<arg_key>…<arg_value>…"),
    "minimax": ("minimax", "MiniMaxSyntax", 'MiniMax M2: <invoke name="…"><parameter name="…">'),
    "deepseek": ("deepseek", "DeepSeekSyntax", "DeepSeek V3.1+: <｜tool▁calls▁begin｜>…"),
    "deepseek_dsml": (
        "deepseek",
        "DeepSeekDSMLSyntax",
        'DeepSeek V3.2: <｜DSML｜function_calls><｜DSML｜invoke name="…">',
    ),
    "deepseek_v4": (
        "deepseek",
        "DeepSeekV4Syntax",
        'DeepSeek V4: <｜DSML｜tool_calls><｜DSML｜invoke name="…">',
    ),
    "kimi": ("kimi", "KimiSyntax", "Kimi K2: <|tool_calls_section_begin|>functions.name:0…"),
    "pythonic": ("pythonic", "PythonicSyntax", "Pythonic: [get_weather(city='Paris')]"),
    "gemma4": ("gemma4", "Gemma4Syntax", "Gemma 4: <|tool_call>call:name{…}<tool_call|>"),
    "harmony": ("harmony", "HarmonySyntax", "gpt-oss harmony: commentary to=functions.name"),
}


def syntax_choices() -> list[tuple[str, str]]:
    return [(name, label) for name, (_, _, label) in _SYNTAXES.items()]


def syntax_class(name: str) -> type[ToolSyntax]:
    """The class for `name`; an unknown name (a row from another build) reads Hermes."""
    module, cls, _ = _SYNTAXES.get(name) or _SYNTAXES["hermes"]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)
