"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens. Its plan builder
(prompt.py), its reply writer (messages.py, blocks.py); `DIALECT` holds them with Anthropic's
error body and framing."""

from inference.serving.anthropic.dialect import DIALECT

__all__ = ["DIALECT"]
