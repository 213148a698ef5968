"""OpenAI's chat completions and legacy completions: each request's plan (plan.py) and the
reply writers that turn engine events into their responses and chunk streams (writer.py);
`DIALECT` (dialect.py) holds them with OpenAI's error body and framing. What only OpenAI has:
/tokenize, /detokenize and /apply-template (tokenize.py), the envelopes, sampling fields and
usage its writers share."""

from inference.serving.openai.dialect import DIALECT

__all__ = ["DIALECT"]
