"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens. Its plan builder
(plan.py), its reply writer (writer.py, with blocks.py); `DIALECT` (dialect.py) holds them with
Anthropic's error body and framing. What only Anthropic has: count_tokens.py."""

from inference.serving.anthropic.dialect import DIALECT

__all__ = ["DIALECT"]
