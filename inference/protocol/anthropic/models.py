"""Anthropic's GET /v1/models and /v1/models/{model_id}, answered in this shape when the request
carries an anthropic-version header."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class AnthropicModel(BaseModel):
    type: Literal["model"] = "model"
    id: str
    display_name: str
    created_at: str  # RFC 3339


class AnthropicModelList(BaseModel):
    data: list[AnthropicModel]
    has_more: bool = False
    first_id: str | None
    last_id: str | None
