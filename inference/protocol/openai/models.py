from typing import Literal

from pydantic import BaseModel


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "organization-owner"
    # What the model is for: "completion" (chat and text), "vision", "embedding".
    capabilities: list[str] = []


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
