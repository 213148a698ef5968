"""The OpenAI wire format: what /v1/chat/completions, /v1/completions and /v1/models accept
and return, and OpenAI's error object."""
