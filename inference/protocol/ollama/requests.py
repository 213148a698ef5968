"""Request bodies of Ollama's /api/chat, /api/generate, /api/embed, /api/embeddings, /api/show
and /api/pull.

Ollama names models `name:tag`; our catalog ids have no tag, and /api/tags lists each as
`id:latest`, so `:latest` is dropped from `model` here (and `huggingface.co/` spelled `hf.co/`)
and the name as sent is kept for the replies (`OllamaRequest.name`). Options Ollama reads when
it loads a model (num_ctx, num_gpu, num_thread...) or that this server has no sampler for
(mirostat, tfs_z, typical_p) are checked for their type and otherwise ignored, as Ollama
ignores the options a runner lacks."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import AliasChoices, ConfigDict, Field, PrivateAttr, field_validator

from inference.protocol.wire import RequestModel

LATEST = ":latest"
# A Go duration ("5m", "1h30m", "-1s", "250ms"), as Ollama's keep_alive takes it.
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


# Ollama takes the hub's two host names for one (hf.co/owner/repo, huggingface.co/owner/repo).
HUB_PREFIX = "hf.co/"
_HUB_HOSTS = ("huggingface.co/",)


def catalog_id(name: str) -> str:
    """The catalog id an Ollama model name stands for: `smollm2:latest` is `smollm2`; a hub
    name is spelled `hf.co/...`, as the alias an /api/pull gives the model it pulls."""
    for host in _HUB_HOSTS:
        if name.lower().startswith(host):
            name = HUB_PREFIX + name[len(host) :]
    if name.lower().startswith(HUB_PREFIX):
        name = HUB_PREFIX + name[len(HUB_PREFIX) :]
    return name[: -len(LATEST)] if name.endswith(LATEST) else name


def duration_seconds(value: float | str) -> float:
    """keep_alive in seconds: a number is seconds, a string a number or a Go duration;
    negative means for ever. ValueError when it is neither."""
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.lstrip("+"))
    parts = _DURATION_PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise ValueError(f"'{value}' is not a duration (such as 30s, 5m, 1h or -1)")
    return sign * sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


class Options(RequestModel):
    model_config = ConfigDict(extra="ignore")

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    # -1: no limit (up to the model's), -2: fill the context; either is no limit of its own.
    num_predict: int | None = Field(default=None, ge=-2)
    stop: list[str] | None = None
    repeat_penalty: float | None = Field(default=None, gt=0)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    # Load-time and unsupported sampler options: typed as Ollama types them, not used.
    num_ctx: int | None = Field(default=None, ge=1)
    num_batch: int | None = None
    num_gpu: int | None = None
    num_thread: int | None = None
    num_keep: int | None = None
    repeat_last_n: int | None = None
    typical_p: float | None = None
    tfs_z: float | None = None
    mirostat: int | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    penalize_newline: bool | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class OllamaRequest(RequestModel):
    """What every Ollama request shares: the model, by the name the client gave it."""

    model_config = ConfigDict(extra="allow")

    # Older clients (and /api/show, /api/pull in Ollama's own docs) send `name`.
    model: str = Field(min_length=1, validation_alias=AliasChoices("model", "name"))
    _name: str = PrivateAttr(default="")

    def model_post_init(self, context: Any) -> None:
        self._name = self.model
        self.model = catalog_id(self.model)

    @property
    def name(self) -> str:
        """The model as the client named it: replies say what was asked for."""
        return self._name


class KeepAlive(OllamaRequest):
    # How long the model stays loaded after this request (seconds, or a duration such as
    # "5m"; 0 unloads it once the request is done, a negative value keeps it loaded).
    keep_alive: float | str | None = None

    @field_validator("keep_alive")
    @classmethod
    def _duration(cls, value: float | str | None) -> float | str | None:
        if value is not None:
            duration_seconds(value)  # a ValueError is the client's 400
        return value

    def keep_alive_seconds(self) -> float | None:
        return None if self.keep_alive is None else duration_seconds(self.keep_alive)


# "json" for any JSON object, a JSON schema for one of that shape, "" for free text.
Format = Literal["", "json"] | dict[str, Any]
Think = bool | Literal["low", "medium", "high"]


class Generating(KeepAlive):
    """What /api/chat and /api/generate share."""

    format: Format | None = None
    options: Options | None = None
    stream: bool = True  # Ollama streams unless told not to
    think: Think | None = None

    @property
    def sampling(self) -> Options:
        return self.options or Options()


class ToolCallFunction(RequestModel):
    model_config = ConfigDict(extra="ignore")  # index, as Ollama's own replies carry it

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCall(RequestModel):
    model_config = ConfigDict(extra="ignore")

    function: ToolCallFunction


class Message(RequestModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    thinking: str | None = None
    images: list[str] | None = None  # base64, no data: prefix
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None  # the tool whose result a "tool" message is


class FunctionSpec(RequestModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)


class Tool(RequestModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["function"] = "function"
    function: FunctionSpec


class ChatRequest(Generating):
    messages: list[Message] = Field(default_factory=list)
    tools: list[Tool] | None = None


class GenerateRequest(Generating):
    prompt: str = ""
    system: str | None = None
    suffix: str | None = None
    raw: bool = False  # the prompt as it is, no chat template
    images: list[str] | None = None
    template: str | None = None
    context: list[int] | None = None


class EmbedRequest(KeepAlive):
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = Field(default=None, ge=1)
    options: Options | None = None


class EmbeddingsRequest(KeepAlive):
    """The legacy /api/embeddings: one prompt, one vector."""

    prompt: str = Field(min_length=1)
    options: Options | None = None


class ShowRequest(OllamaRequest):
    verbose: bool = False


class PullRequest(OllamaRequest):
    insecure: bool = False
    stream: bool = True
