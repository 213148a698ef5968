"""Ollama's API: /api/chat and /api/generate (plan.py, reply.py), /api/embed and
/api/embeddings, the model listings (/api/tags, /api/show, /api/ps, /api/version) and
/api/pull's refusal; `DIALECT` holds the generation endpoints with Ollama's error body and its
NDJSON framing."""

from inference.serving.ollama.dialect import DIALECT

__all__ = ["DIALECT"]
