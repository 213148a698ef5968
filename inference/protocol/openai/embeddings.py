"""Request and response shapes of POST /v1/embeddings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inference.protocol.errors import invalid_param
from inference.protocol.wire import RequestModel

TokenIds = list[int]


class EmbeddingRequest(RequestModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: str | list[str] | TokenIds | list[TokenIds]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None
    # Extension: which of the catalog entry's prefixes (query_prefix, document_prefix) goes
    # before each text input; none without it.
    input_type: Literal["query", "document"] | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> EmbeddingRequest:
        # OpenAI refuses an empty list, an empty string and an empty token list alike.
        items = self.inputs()
        if not items:
            raise invalid_param("input", "input must not be an empty list.")
        for index, item in enumerate(items):
            if item in ("", []):
                raise invalid_param("input", f"input[{index}] is empty; every input needs text.")
        return self

    def inputs(self) -> list[str | TokenIds]:
        """One entry per vector asked for."""
        given = self.input
        if isinstance(given, str):
            return [given]
        if given and all(isinstance(item, int) for item in given):
            return [given]  # type: ignore[list-item]
        return list(given)  # type: ignore[arg-type]


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    # float: the vector; base64: its little-endian float32 bytes, as OpenAI sends them.
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
