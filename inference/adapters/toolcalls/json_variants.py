"""JSON lists of calls behind a family's own tags: the JSON scanner reads them as it reads
Hermes; only the markers, the name key and the grammar differ.

- Granite 3.x: `<|tool_call|>[{"name": "f", "arguments": {...}}, ...]`;
- Nemotron Nano 2: `<TOOLCALL>[{"name": "f", "arguments": {...}}, ...]</TOOLCALL>`;
- Command R7B: `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}]`
  then `<|END_ACTION|>`."""

from __future__ import annotations

from inference.adapters.toolcalls.json_calls import JSONCallSyntax


class _JSONListSyntax(JSONCallSyntax):
    call_separator = ", "


class GraniteSyntax(_JSONListSyntax):
    name = "granite"
    label = "Granite 3: <|tool_call|>[{…}]"
    markers = ("<|tool_call|>", "<tool_call>")
    calls_prefix = "<|tool_call|>["
    calls_suffix = "]"


class NemotronSyntax(_JSONListSyntax):
    name = "nemotron"
    label = "Nemotron Nano 2: <TOOLCALL>[{…}]</TOOLCALL>"
    markers = ("<TOOLCALL>",)
    calls_prefix = "<TOOLCALL>["
    calls_suffix = "]</TOOLCALL>"


class CommandRSyntax(_JSONListSyntax):
    name = "command_r"
    label = 'Command R7B: <|START_ACTION|>[{"tool_name": …, "parameters": …}]'
    markers = ("<|START_ACTION|>",)
    name_keys = ("tool_name", "name")
    calls_prefix = "<|START_ACTION|>["
    calls_suffix = "]<|END_ACTION|>"
    call_separator = ",\n    "
    arguments_key = "parameters"
