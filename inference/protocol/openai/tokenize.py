"""Request and response shapes of POST /tokenize, /detokenize and /apply-template (also under
/v1): llama.cpp's server names (`content`, `add_special`, `with_pieces`; `{content}` back) and
vLLM's (`prompt`, `add_special_tokens`, the chat form with `messages`; `count`,
`max_model_len`, `prompt` back), both accepted, so either server's clients work unchanged."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inference.protocol.errors import invalid_param
from inference.protocol.openai.chat import ChatMessage, OnlyPresent, ToolDefinition
from inference.protocol.openai.common import JSONObject
from inference.protocol.wire import RequestModel


class ChatTemplateFields(RequestModel):
    """A conversation to render as the model's chat template renders it for chat."""

    model_config = ConfigDict(extra="allow")

    # llama.cpp's server has one model and its clients send none: left out, the catalog's
    # default model for unknown ids.
    model: str = ""
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    tools: list[ToolDefinition] | None = Field(default=None, max_length=128)
    add_generation_prompt: bool = True
    chat_template_kwargs: JSONObject | None = None


class TokenizeRequest(ChatTemplateFields):
    content: str | None = None  # llama.cpp
    prompt: str | None = None  # vLLM
    # Whether the tokenizer's own special tokens (BOS...) go around text. llama.cpp's name
    # defaults to false, vLLM's to true for a prompt and false for messages (whose template
    # writes its own): unsent, the default of the dialect whose text field came.
    add_special: bool | None = None
    add_special_tokens: bool | None = None
    with_pieces: bool = False  # llama.cpp: [{id, piece}] instead of ids
    return_token_strs: bool = False  # vLLM: token_strs beside the ids

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        given = [n for n in ("content", "prompt", "messages") if getattr(self, n) is not None]
        if len(given) != 1:
            raise invalid_param(
                "content", "Send exactly one of content, prompt (text) or messages (chat)."
            )
        return self

    def text(self) -> str | None:
        return self.content if self.content is not None else self.prompt

    def special_tokens(self) -> bool:
        for asked in (self.add_special, self.add_special_tokens):
            if asked is not None:
                return asked
        return self.prompt is not None


class ApplyTemplateRequest(ChatTemplateFields):
    messages: list[ChatMessage] = Field(min_length=1)  # type: ignore[assignment]


class DetokenizeRequest(RequestModel):
    model_config = ConfigDict(extra="allow")

    model: str = ""  # as ChatTemplateFields.model
    tokens: list[int]


class TokenPiece(BaseModel):
    id: int
    # The token's text; its bytes as a list when they are not valid UTF-8 alone (llama.cpp's
    # shape: a byte-level token may hold part of one character).
    piece: str | list[int]


class TokenizeResponse(OnlyPresent):
    tokens: list[int] | list[TokenPiece]
    count: int
    max_model_len: int
    token_strs: list[str] | None = None


class DetokenizeResponse(BaseModel):
    content: str  # llama.cpp's name
    prompt: str  # vLLM's: the same text


class ApplyTemplateResponse(BaseModel):
    prompt: str  # the text the model reads: its tokens decoded, special tokens written out
    tokens: list[int]
    count: int
    max_model_len: int
