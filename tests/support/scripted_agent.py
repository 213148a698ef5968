"""A generated "agent" model whose replies are known in advance, for driving real coding agents
(Claude Code, Codex) against the server end to end (tests/live/test_agents.py).

Built like tests/support/scripted.py: a real MLX Llama with SmolLM2's tokenizer plus added tokens
(one per piece of the scripts), its layers adding nothing to the residual stream, so the next token
depends on the current one only and the prompt's last token picks the script. Its chat template
ends the prompt with one of two tails:

- no tool result in the conversation yet: CALL_TAIL, after which it writes one Hermes tool call
  (`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`) of the tool and arguments the
  builder was given; a model built without a call answers at once;
- a `tool` message holding the text the builder expects (the file the call reads, say):
  ANSWER_TAIL, after which it writes the answer; tool results without it: MISSED_TAIL, after
  which it writes MISSED. So the answer shows that the agent ran the call and sent back what it
  got, not only that it sent something back.

It is tiny (hidden 64, 1 layer) with a long context (65536 positions), so an agent's
20k-token prompt is read in seconds on a CPU; the template shows the model every message and
tool, so the prompt is as long as the agent made it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.scripted import ids, last_id, save_chained_model, scripted_tokenizer

CONTEXT = 65536
CALL_TAIL = "<|im_start|>assistant\n"
ANSWER_TAIL = "<|im_start|>assistant\n<|tool_results_read|>"
MISSED_TAIL = "<|im_start|>assistant\n<|tool_results_missed|>"
MISSED = "(The tool results lack the text this script expects.)"
END = "<|im_end|>"

# EXPECTED is replaced by the builder's `expect`, as a JSON string (a valid Jinja literal).
TEMPLATE = """\
{%- set ns = namespace(results=false, seen=false) %}
{%- for m in messages %}{% if m.role == 'tool' %}{% set ns.results = true %}\
{% if m.content is string and EXPECTED in m.content %}{% set ns.seen = true %}{% endif %}\
{% endif %}{% endfor %}
{%- if tools %}<|im_start|>system
You may call these tools: <tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\
<|im_end|>
{% endif %}
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content if m.content is string else m.content | tojson }}\
{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}\
<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if ns.seen %}<|tool_results_read|>{% elif ns.results %}<|tool_results_missed|>{% endif %}\
{% endif %}"""


@dataclass(frozen=True)
class ScriptedCall:
    """The one tool call the model makes before any tool result is in the conversation."""

    name: str
    arguments: dict[str, Any]

    def pieces(self) -> tuple[str, ...]:
        body = json.dumps({"name": self.name, "arguments": self.arguments}, ensure_ascii=False)
        # Split in two, so the arguments reach the reader over more than one token.
        cut = body.index('"arguments"')
        return ("<tool_call>", "\n" + body[:cut], body[cut:] + "\n", "</tool_call>")


def answer_pieces(answer: str) -> tuple[str, ...]:
    """The answer as one added token per word (each must be a distinct token)."""
    words = answer.split(" ")
    pieces = (words[0], *(" " + word for word in words[1:]))
    assert len(set(pieces)) == len(pieces), "an answer word used twice"
    return pieces


def build_agent_model(
    tokenizer_source: Path,
    destination: Path,
    call: ScriptedCall | None,
    answer: str,
    expect: str = "",
) -> Path:
    """The model in `destination`: `call` first (when given), then `answer` once a tool result
    holding `expect` is in the conversation (MISSED after results without it)."""
    call_script = call.pieces() if call else ()
    answer_script = answer_pieces(answer)
    markers = ("<|tool_results_read|>", "<|tool_results_missed|>", MISSED)
    pieces = dict.fromkeys([*call_script, *answer_script, *markers])
    template = TEMPLATE.replace("EXPECTED", json.dumps(expect))
    config = {"chat_template": template, "model_max_length": CONTEXT}
    tokenizer = scripted_tokenizer(tokenizer_source, destination, pieces, config)

    end = tokenizer.token_to_id(END)
    # Without a call, the opening prompt leads into the answer's chain.
    opening = [*ids(tokenizer, call_script), end] if call else ids(tokenizer, answer_script)[:1]
    chains = [
        [last_id(tokenizer, ANSWER_TAIL), *ids(tokenizer, answer_script), end],
        [last_id(tokenizer, MISSED_TAIL), tokenizer.token_to_id(MISSED), end],
        [last_id(tokenizer, CALL_TAIL), *opening],
    ]
    # One layer: prefill then only computes its keys and values (they do not depend on
    # attention), and attention runs for the last chunk only: a 20k-token prompt in a second
    # or two on 2 CPU cores, where 2 layers took ~50 s (every chunk's attention).
    save_chained_model(
        destination,
        chains,
        tokenizer.get_vocab_size(),
        max_position_embeddings=CONTEXT,
        num_hidden_layers=1,
    )
    return destination
