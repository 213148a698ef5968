"""What every tool-call syntax must do, as helpers its own tests call:

- `stream_at_every_split`: the text fed in pieces of every size gives the same calls, with
  arguments deltas whose concatenation is each call's arguments, and no markup as content;
- `grammar_accepts`: the syntax's forced-call grammar takes the text token by token (a real
  tokenizer, llguidance as the engine runs it) and accepts at its end."""

from __future__ import annotations

import json

from inference.adapters import FamilyProfile, get_adapter
from inference.adapters.toolcalls import Function, syntax_class
from inference.serving.reply import (
    ReplyParser,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from inference.serving.structured import checked_grammar, closed_objects
from inference.serving.tooluse import FunctionTool, ToolUse

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "metric": {"type": "boolean"},
    },
    "required": ["city"],
}
OFFERED = ToolUse((FunctionTool("get_weather", None, WEATHER_SCHEMA), FunctionTool("now")))


def parse_streamed(syntax: str, text: str, piece: int, tool_use: ToolUse = OFFERED):
    """The reply parser of a family writing `syntax`, fed `text` in pieces of `piece` chars:
    (content, [(name, arguments object)]), checking the events' invariants on the way."""
    adapter = get_adapter(FamilyProfile(tool_syntax=syntax))
    parser = ReplyParser(adapter, tool_use)
    events = [e for i in range(0, len(text), piece) for e in parser.feed(text[i : i + piece])]
    events += parser.finish()
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    for end in ends:
        deltas = [
            e.text for e in events if isinstance(e, ToolArgumentsDelta) and e.index == end.index
        ]
        assert "".join(deltas) == end.arguments, (syntax, piece)
        starts = [e for e in events if isinstance(e, ToolCallStart) and e.index == end.index]
        assert len(starts) == 1 and starts[0].name == end.name
    content = "".join(e.text for e in events if isinstance(e, TextDelta))
    return content.strip() or None, [(e.name, json.loads(e.arguments)) for e in ends]


def stream_at_every_split(syntax: str, text: str, tool_use: ToolUse = OFFERED):
    """The same parse at every piece size; returns it."""
    results = {
        size: parse_streamed(syntax, text, size, tool_use) for size in range(1, len(text) + 1)
    }
    first = results[len(text)]
    for size, result in results.items():
        assert result == first, f"{syntax}: split {size} gave {result}, whole gave {first}"
    return first


def grammar_accepts(tokenizer, syntax: str, text: str, functions=None, parallel=False) -> bool:
    """Whether `syntax`'s grammar for `functions` (default: get_weather alone) takes `text`
    token by token, as the engine's constraint would, and accepts at its end."""
    import llguidance

    from inference.engine.constraints import ll_tokenizer_of
    from inference.engine.grammar_tokens import added_token_ids, with_marker_tokens

    functions = functions or [Function("get_weather", closed_objects(WEATHER_SCHEMA))]
    lark = syntax_class(syntax)().grammar(functions, parallel)
    # As the engine compiles it: markers the vocabulary has as tokens are those tokens.
    lark = with_marker_tokens(lark, added_token_ids(tokenizer))
    matcher = llguidance.LLMatcher(ll_tokenizer_of(tokenizer), checked_grammar(lark, "tools"))
    assert not matcher.is_error(), matcher.get_error()
    for token in tokenizer.encode(text, add_special_tokens=False):
        if not matcher.consume_token(token):
            return False
    return matcher.is_accepting()
