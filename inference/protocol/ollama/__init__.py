"""Ollama's API (/api/*) on the wire: chat, generate, embed and the model listings, requests,
responses and their NDJSON stream objects, and its error body {"error": "..."}."""
