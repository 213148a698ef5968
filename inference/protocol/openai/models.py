from typing import Literal

from pydantic import BaseModel, Field


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "organization-owner"
    # What the model is for: "completion" (chat and text), "vision", "embedding".
    capabilities: list[str] = []
    # The other ids it answers to: exact ids, and globs where * is any text.
    aliases: list[str] = []
    # On an entry for an alias (or an id a glob or the default matched): the model that
    # serves it. Absent on a model's own entry.
    alias_of: str | None = Field(default=None, exclude_if=lambda v: v is None)


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
