"""What crosses the boundary between serving (asyncio) and the engine thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

# A request's priority (RequestContext.priority, carried on each of its jobs): interactive work
# is served first; batch work (the Batch API's lines) runs in what interactive work leaves
# (engine/scheduling.py) and queues apart (engine/admission.py).
INTERACTIVE = "interactive"
BATCH = "batch"
PRIORITIES = (INTERACTIVE, BATCH)


@dataclass(frozen=True)
class ModelSpec:
    """Where a catalog model's weights are; built by serving, loaded by the pool."""

    model_id: str
    location: str
    from_hub: bool = False
    context_length: int | None = None
    pinned: bool = False  # never unloaded to make room, nor for being idle
    compute_format: str = "auto"  # one of formats.COMPUTE_FORMATS
    kv_cache: str = "auto"  # one of formats.KV_CACHE_FORMATS
    activations: str = "15bit"  # one of formats.ACTIVATION_ROUNDINGS
    purpose: str = "chat"  # "chat", "embedding" or "rerank": which loader and which runner
    vision: bool = False  # a chat model that reads images (loaded through mlx-vlm)
    pooling: str = "auto"  # embedding models: "auto", "last", "mean" or "cls"
    normalize: bool = True  # embedding models: unit-length vectors
    # Over a distributed group (engine/lockstep.py): "tensor" (each rank holds a slice of
    # every layer) or "pipeline" (each rank holds some layers); "" loads it whole on each rank.
    parallel: str = ""
    # The catalog's draft model for speculative decoding (engine/drafting.py): loaded with this
    # one, whole on every rank, and gone with it.
    draft: ModelSpec | None = None
    # A LoRA adapter (engine/lora.py): `location` is the adapter's folder, `base` the model
    # whose weights it shares in the pool (loaded first, and kept while the adapter is).
    base: ModelSpec | None = None


@dataclass(frozen=True)
class TokenPrompt:
    ids: tuple[int, ...]
    # Prepared by serving from a chat prompt: how many messages its overflow policy left out,
    # and the request field an error about its length names.
    truncated_messages: int = 0
    param: str = "prompt"


@dataclass(frozen=True)
class ImagePrompt:
    """A chat prompt with images, prepared by serving: the chat template's text with the
    images' placeholders; the engine's vision model turns it into tokens and embeddings."""

    text: str
    images: tuple[Any, ...]
    param: str = "messages"


# What the engine reads: serving rendered and tokenized it (serving/prepare.py).
Prompt = TokenPrompt | ImagePrompt


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    # An llguidance grammar (JSON schema, lark...) the output must match.
    grammar: str | None = None
    # Speculative decoding (engine/drafting.py): "" off, or the drafter ("ngram": prompt
    # lookup; "draft_model": the model's draft model); up to `draft_tokens` proposed tokens
    # are verified in each decode step.
    speculative: str = ""
    draft_tokens: int = 4


class ErrorKind(Enum):
    INVALID_REQUEST = "invalid_request"
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
    MODEL_UNAVAILABLE = "model_unavailable"
    TIMEOUT = "timeout"
    OVERLOADED = "overloaded"
    PROMPT_TOO_LARGE = "too_many_prompt_tokens"
    ENGINE_RESTARTED = "engine_restarted"
    SHUTTING_DOWN = "shutting_down"
    ENGINE_UNAVAILABLE = "engine_unavailable"  # the distributed group broke: no restart helps
    INTERNAL = "internal"


class EngineError(Exception):
    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        param: str | None = None,
        retry_after: float | None = None,
        prompt_tokens: int | None = None,
        context_length: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param
        self.retry_after = retry_after
        # CONTEXT_LENGTH_EXCEEDED: the two numbers each dialect's error names.
        self.prompt_tokens = prompt_tokens
        self.context_length = context_length


@dataclass(frozen=True)
class Candidate:
    """One of the most likely tokens at a position (engine side of OpenAI's top_logprobs)."""

    token: str
    bytes: bytes
    logprob: float


@dataclass(frozen=True)
class SampledToken:
    """The token sampled at a position, its log-probability and the top candidates there."""

    token: str
    bytes: bytes
    logprob: float
    top: tuple[Candidate, ...] = ()


@dataclass(frozen=True)
class Started:
    """The request is admitted: prompt rendered, checked and queued for prefill."""

    prompt_tokens: int
    prompt_text: str | None = None  # only when the job asked for an echo
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
    truncated_messages: int = 0  # messages left out to fit the context (overflow.py)


@dataclass(frozen=True)
class Delta:
    text: str
    logprobs: tuple[SampledToken, ...] = ()


@dataclass(frozen=True)
class Done:
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    stop_sequence: str | None = None  # the stop string that ended it, if one did


@dataclass(frozen=True)
class Failed:
    error: EngineError


Event = Started | Delta | Done | Failed


@dataclass(frozen=True)
class JobRequest:
    """One sequence as serving prepared it (serving/prepare.py: its prompt rendered and
    tokenized, its family's stops and its grammar filled in, off the engine thread); the
    handle turns it into a GenerationJob."""

    spec: ModelSpec
    prompt: Prompt
    params: SamplingParams
    echo: bool = False
    stop_ids: frozenset[int] = frozenset()  # the family's stop tokens (EOS included)
    stop_strings: tuple[str, ...] = ()  # the family's stop strings (the request's: params)
    matcher: Any = None  # params.grammar compiled (llguidance), this job's own copy


@dataclass(eq=False)  # compared and hashed by identity: engines keep sets of live jobs
class GenerationJob:
    spec: ModelSpec
    prompt: Prompt
    params: SamplingParams
    # Called on the engine thread for every event; must be thread-safe and never block.
    sink: Callable[[Event], None]
    echo: bool = False
    stop_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    # The compiled grammar; a group's followers get params.grammar and compile their own.
    matcher: Any = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Fair shares: who sent it (the API key's name) and which request it belongs to.
    owner: str = ""
    group: str = ""
    priority: str = INTERACTIVE  # one of PRIORITIES
    # Engine thread only: the engine's own id for it (the same on every rank of a group),
    # and `cancelled` as the engine last read it (read once per turn, so that every rank
    # drops it at the same step).
    id: int = 0
    dropped: bool = False


@dataclass(frozen=True)
class Embedded:
    """An embedding job's answer: one float32 vector per input, in input order."""

    vectors: list  # of numpy float32 arrays: the engine hands back plain memory, not MLX
    prompt_tokens: int


@dataclass(eq=False)  # compared and hashed by identity, like GenerationJob
class EmbeddingJob:
    """One request's inputs for an embedding model; answered by one Embedded or Failed."""

    spec: ModelSpec
    inputs: list[str | tuple[int, ...]]  # text, or token ids (special tokens are added)
    sink: Callable[[Embedded | Failed], None]
    max_tokens: int | None = None  # the catalog's cap on one input; None: the model's context
    truncate: bool = False  # cut longer inputs to the cap instead of failing the request
    cancelled: threading.Event = field(default_factory=threading.Event)
    owner: str = ""
    priority: str = INTERACTIVE  # an interactive request's rows run before batch ones
    id: int = 0  # as GenerationJob's
    dropped: bool = False
