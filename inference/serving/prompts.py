"""What a request asks the model to read, before serving prepares it (serving/prepare.py):
chat messages to render with the family's template, or text to tokenize, or token ids as a
client sent them; and one sequence of it, with its model, family and sampling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inference.adapters import FamilyAdapter
from inference.engine.types import ModelSpec, SamplingParams, TokenPrompt


@dataclass(frozen=True)
class ChatPrompt:
    messages: list[dict]
    tools: list[dict] | None = None
    # Extra chat-template variables: a client's chat_template_kwargs, enable_thinking.
    template_kwargs: dict | None = None
    # Text the assistant's reply already starts with (Anthropic's prefill): it follows the
    # generation prompt, and the reply continues it.
    prefill: str = ""
    # Images (decoded PIL images), in the order of the {"type": "image"} placeholders in the
    # messages' content lists; only vision models read them (engine/vision/).
    images: tuple[Any, ...] = ()
    # What to do with a prompt over the context (engine/overflow.py): "error", or
    # "truncate_middle" (drop old turns). The catalog's choice; not part of ModelSpec, so
    # changing it never reloads the model.
    overflow: str = "error"
    # Whether the assistant's turn is opened after the messages: always for generation; a
    # client of /tokenize or /apply-template may ask for the conversation alone.
    generation_prompt: bool = True


@dataclass(frozen=True)
class TextPrompt:
    text: str


Asked = ChatPrompt | TextPrompt | TokenPrompt


@dataclass(frozen=True)
class PromptJob:
    """One sequence a request asks for; serving/prepare.py turns it into the engine's
    JobRequest. Copies of one prompt (a request's n) share the prompt object."""

    spec: ModelSpec
    adapter: FamilyAdapter
    prompt: Asked
    params: SamplingParams
    echo: bool = False
