"""Ollama's API: /api/chat and /api/generate (plan.py, writer.py, run by generate.py with
keep_alive's loads and unloads), /api/embed and /api/embeddings (embed.py), the model listings
(/api/tags, /api/show, /api/ps, /api/version: models.py) and /api/pull (pull.py); `DIALECT`
(dialect.py) holds the generation endpoints with Ollama's error body and its NDJSON framing."""

from inference.serving.ollama.dialect import DIALECT

__all__ = ["DIALECT"]
