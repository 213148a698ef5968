"""Markers written as the tokens the model has for them.

A forced tool call's grammar (lark, written by the family's tool-call syntax) spells markers
as text: `"<tool_call>\\n<function=f>"`. llguidance matches a literal by bytes, and it reads a
model's added tokens (`<tool_call>`, `<|channel|>`, DeepSeek's tool separators) as special:
a literal would force the model to spell the marker out of ordinary pieces, never the one
token it was trained to write. So before a grammar is compiled for a model, every added
token's text inside a string literal of a rule becomes that token (`<[id]>`). Terminal
definitions, `%json` bodies and regexes are left as they are."""

from __future__ import annotations

import json
import re

_RULE = re.compile(r"^([a-z_][a-z0-9_]*)\s*:(.*)$")


def added_token_ids(tokenizer) -> dict[str, int]:
    """Text -> id of the tokenizer's added tokens worth matching whole (more than one char)."""
    # mlx-lm's wrapper keeps the Hugging Face tokenizer in _tokenizer.
    hf = tokenizer if hasattr(tokenizer, "added_tokens_decoder") else tokenizer._tokenizer
    added = hf.added_tokens_decoder or {}
    return {token.content: index for index, token in added.items() if len(token.content) > 1}


def with_marker_tokens(grammar: str, tokens: dict[str, int]) -> str:
    """`grammar` (lark) with the tokens' texts in rule literals matched as tokens; a JSON
    grammar (response_format) comes back unchanged."""
    if not tokens or grammar.lstrip().startswith("{"):
        return grammar
    pattern = re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))
    lines = []
    for line in grammar.split("\n"):
        rule = _RULE.match(line)
        if rule:
            line = f"{rule.group(1)}:{_rewrite(rule.group(2), pattern, tokens)}"
        lines.append(line)
    return "\n".join(lines)


def _rewrite(body: str, pattern: re.Pattern, tokens: dict[str, int]) -> str:
    out, i = [], 0
    while i < len(body):
        end = _skip(body, i)
        if end > i:  # %json {...} or /regex/: as written
            out.append(body[i:end])
            i = end
        elif body[i] == '"':
            end = _string_end(body, i)
            out.append(_split_literal(body[i:end], pattern, tokens))
            i = end
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def _skip(body: str, i: int) -> int:
    """The end of a `%json {...}` or `/regex/` starting at i (i when none starts there)."""
    if body.startswith("%json", i):
        start = body.index("{", i)
        depth, j = 0, start
        while j < len(body):
            if body[j] == '"':
                j = _string_end(body, j)
                continue
            depth += {"{": 1, "}": -1}.get(body[j], 0)
            j += 1
            if depth == 0:
                return j
        return len(body)
    if body[i] == "/":
        j = i + 1
        while j < len(body) and body[j] != "/":
            j += 2 if body[j] == "\\" else 1
        return j + 1
    return i


def _string_end(body: str, i: int) -> int:
    j = i + 1
    while j < len(body) and body[j] != '"':
        j += 2 if body[j] == "\\" else 1
    return j + 1


def _split_literal(literal: str, pattern: re.Pattern, tokens: dict[str, int]) -> str:
    try:
        text = json.loads(literal)
    except ValueError:
        return literal  # not one of ours (lark-only escapes): left alone
    parts, last = [], 0
    for found in pattern.finditer(text):
        if found.start() > last:
            parts.append(json.dumps(text[last : found.start()], ensure_ascii=False))
        parts.append(f"<[{tokens[found.group()]}]>")
        last = found.end()
    if not parts:
        return literal
    if last < len(text):
        parts.append(json.dumps(text[last:], ensure_ascii=False))
    return "(" + " ".join(parts) + ")"
