"""OpenAI's chat completions and legacy completions: each request's plan (chat.py,
completions.py), and the reply writers that turn engine events into their responses and chunk
streams; `DIALECT` holds them with OpenAI's error body and framing."""

from inference.serving.openai.dialect import DIALECT

__all__ = ["DIALECT"]
