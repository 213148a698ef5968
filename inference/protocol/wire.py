"""What every request wire model shares, in every dialect.

`null` for an optional field means its default, as the OpenAI and Anthropic APIs read it:
clients built on generated types send every field they know, unset ones as null (LiteLLM's
`"encoding_format": null`, the Agents SDK's `"top_p": null`...). A required field sent as null
is still an error."""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator


class RequestModel(BaseModel):
    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not any(value is None for value in data.values()):
            return data
        optional = _optional_keys(cls)
        return {k: v for k, v in data.items() if v is not None or k not in optional}


@cache
def _optional_keys(model: type[BaseModel]) -> frozenset[str]:
    """The names (and wire aliases) of the fields that have a default."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        if not field.is_required():
            keys.update(key for key in (name, field.alias, field.validation_alias) if key)
    return frozenset(k for k in keys if isinstance(k, str))


# "ngram": prompt lookup; "draft_model": the catalog's draft model for the model asked.
SpeculativeMethod = Literal["ngram", "draft_model", "mtp", "off"]


class SpeculativeOptions(RequestModel):
    """`speculative` as an object (vLLM's speculative_config names): the drafter and how many
    tokens it may propose a step."""

    method: SpeculativeMethod
    num_speculative_tokens: int | None = Field(default=None, ge=1, le=16)


# Speculative decoding per request: a method, or the object above; left out, the catalog's
# default for the model. An extension every dialect accepts.
Speculative = SpeculativeMethod | SpeculativeOptions
