"""The OpenAI wire format as pydantic models: what /v1 accepts and returns."""
