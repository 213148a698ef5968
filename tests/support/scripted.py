"""A generated reasoning model whose output is known in advance, for tests of what serving makes
of thinking and tool calls: markers split over tokens, arguments spread over several tokens.

It is a real MLX Llama with SmolLM2's tokenizer plus a few added tokens (one per piece of the
scripts, as Qwen3 has `<think>` and `<tool_call>` as tokens). Its layers add nothing to the
residual stream, so the next token depends on the current one only: each script's pieces are
chained token to token, and the prompt's last token picks the script. Greedy or not, it writes:

- thinking on (the template's default): THINK_THEN_CALL — thinking, then a Hermes tool call;
- enable_thinking false (the template closes an empty thinking in the prompt): PLAIN.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

THINK_THEN_CALL = (
    "<think>",
    "\nThe user",
    " wants the weather",
    " in Paris.\n</th",  # the closing marker arrives in two tokens
    "ink>\n\n",
    "<tool_call>",
    '\n{"name": "get_weather", ',
    '"arguments": {"city": ',
    '"Par',
    'is", "days": ',
    "3}}",
    "\n</tool_call>",
)
PLAIN = ("It is", " sunny in", " Paris.")
REASONING = "The user wants the weather in Paris."
ARGUMENTS = '{"city": "Paris", "days": 3}'
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}

TEMPLATE = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}
{% endif %}You may call these tools: <tools>{% for t in tools %}{{ t | tojson }}{% endfor %}\
</tools><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role != 'system' %}<|im_start|>{{ m.role }}
{{ m.content or '' }}{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}\
</tool_call>{% endfor %}<|im_end|>
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}"""

THINKING_ON_TAIL = "<|im_start|>assistant\n"
THINKING_OFF_TAIL = "</think>\n\n"
END = "<|im_end|>"


def scripted_tokenizer(source: Path, destination: Path, pieces, config: dict) -> Any:
    """SmolLM2's tokenizer saved in `destination` (made here) with each of `pieces` added as
    one token, and `config` (the chat template...) over its tokenizer_config.json."""
    from tokenizers import AddedToken, Tokenizer

    destination.mkdir(parents=True)
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.add_tokens([AddedToken(p, normalized=False) for p in pieces])
    tokenizer.save(str(destination / "tokenizer.json"))
    settings = json.loads((source / "tokenizer_config.json").read_text())
    settings.update(config)
    settings.pop("added_tokens_decoder", None)  # tokenizer.json has them all now
    (destination / "tokenizer_config.json").write_text(json.dumps(settings))
    return tokenizer


def last_id(tokenizer: Any, text: str) -> int:
    return tokenizer.encode(text, add_special_tokens=False).ids[-1]


def ids(tokenizer: Any, script: tuple[str, ...]) -> list[int]:
    return [tokenizer.token_to_id(p) for p in script]


def build_scripted_model(tokenizer_source: Path, destination: Path) -> Path:
    pieces = [*THINK_THEN_CALL, *PLAIN, "</think>"]
    tokenizer = scripted_tokenizer(
        tokenizer_source, destination, pieces, {"chat_template": TEMPLATE}
    )
    end = tokenizer.token_to_id(END)
    chains = [
        [last_id(tokenizer, THINKING_ON_TAIL), *ids(tokenizer, THINK_THEN_CALL), end],
        [last_id(tokenizer, THINKING_OFF_TAIL), *ids(tokenizer, PLAIN), end],
    ]
    save_chained_model(destination, chains, tokenizer.get_vocab_size())
    return destination


def save_chained_model(
    destination: Path, chains: list[list[int]], vocab_size: int, **overrides: Any
) -> None:
    """A tiny Llama (TINY_CONFIG with `overrides`) in `destination` whose layers add nothing
    to the residual stream, so each token of a chain is followed by the next."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.llama import Model, ModelArgs

    from tests.support.helpers import TINY_CONFIG

    model_config = {
        **TINY_CONFIG,
        "vocab_size": vocab_size,
        "tie_word_embeddings": False,
        **overrides,
    }
    (destination / "config.json").write_text(json.dumps(model_config))
    model = Model(ModelArgs.from_dict(model_config))
    weights = dict(tree_flatten(model.parameters()))
    weights.update(_bigram_weights(chains, vocab_size, model_config["hidden_size"]))
    for name in list(weights):
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = mx.zeros_like(weights[name])  # layers add nothing to the stream
    mx.save_safetensors(str(destination / "model.safetensors"), weights)


def _bigram_weights(chains: list[list[int]], vocab_size: int, hidden: int) -> dict:
    """Orthonormal embeddings for the chained tokens; the unembedding row of each token's
    successor points along it, so that successor wins by a wide margin."""
    import mlx.core as mx
    import numpy as np

    current = sorted({token for chain in chains for token in chain[:-1]})
    assert len(current) <= hidden, "more chained tokens than dimensions"
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.standard_normal((hidden, hidden)))
    embed = rng.standard_normal((vocab_size, hidden)).astype(np.float32) * 0.01
    unembed = np.zeros((vocab_size, hidden), dtype=np.float32)
    for row, token in enumerate(current):
        embed[token] = basis[row]
    # Chains may share a tail (two ways into one script), never a token with two successors.
    pairs = {pair for chain in chains for pair in itertools.pairwise(chain)}
    successors = dict(pairs)
    assert len(successors) == len(pairs), "a token followed by two different tokens"
    for token, successor in successors.items():
        unembed[successor] += 4.0 * embed[token]
    return {
        "model.embed_tokens.weight": mx.array(embed),
        "lm_head.weight": mx.array(unembed),
    }
