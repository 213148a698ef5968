"""A request's prompts made ready for the engine, off its thread: rendered with the family's
chat template, tokenized, cut to the context under the catalog's overflow policy, the family's
stops named and the grammar compiled, once per distinct prompt (n copies share it: each gets
its own copy of the compiled grammar). The engine receives token ids (or, for images, the
template's text for the model's processor) and never renders anything.

The limits come first: characters before anything is rendered (a prompt no token limit would
take is refused without being read), then tokens, every copy counted."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, TypeVar

from django.conf import settings
from jinja2 import TemplateError

from inference.adapters.base import ChatTemplateMissing, render_template
from inference.engine.overflow import reply_room, too_many_prompt_tokens, truncate_middle
from inference.engine.types import (
    EngineError,
    ErrorKind,
    ImagePrompt,
    JobRequest,
    ModelSpec,
    Prompt,
    TokenPrompt,
)
from inference.engine.vocabulary import Vocabulary, vocabularies
from inference.protocol.errors import APIError
from inference.serving.context import RequestContext
from inference.serving.errors import api_error
from inference.serving.prompts import ChatPrompt, PromptJob, TextPrompt

log = logging.getLogger(__name__)
T = TypeVar("T")
# Arguments only the template call itself takes: a request's kwargs never override them.
_TEMPLATE_ONLY = ("chat_template", "tools", "add_generation_prompt", "tokenize")


@cache
def _threads() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(settings.PROMPT_THREADS, thread_name_prefix="prompt")


async def _on_prompt_thread(work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` on a prompt thread; an EngineError it raises is the client's APIError."""
    try:
        return await asyncio.get_running_loop().run_in_executor(_threads(), work, *args)
    except EngineError as exc:
        raise api_error(exc) from None


@dataclass(frozen=True)
class Ready:
    """One distinct prompt, prepared."""

    prompt: Prompt
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    matcher: Any  # the compiled grammar, or None


async def prepare_requests(requests: list[PromptJob]) -> list[JobRequest]:
    """`requests` with their prompts prepared; raises the APIError a limit or a bad prompt
    gives. Copies of one prompt (one request's n) are the same object and prepared once."""
    distinct = list({id(r.prompt): r for r in requests}.values())
    param = "messages" if isinstance(distinct[0].prompt, ChatPrompt) else "prompt"
    check_characters(sum(_characters(r.prompt) for r in distinct), param)
    ready = {id(r.prompt): await _on_prompt_thread(_ready, r) for r in distinct}
    prepared = [_prepared(r, ready[id(r.prompt)], first=i == 0) for i, r in enumerate(requests)]
    _check_tokens(prepared)
    return prepared


async def count_prompt_tokens(ctx: RequestContext, request: PromptJob) -> int:
    """How many tokens `request`'s prompt takes, prepared as a job of it would be, under the
    same limits (a prompt with images: the model's processor counts it, on the engine)."""
    (prepared,) = await prepare_requests([request])
    if isinstance(prepared.prompt, ImagePrompt):
        try:
            return await ctx.engine.count_image_prompt(request.spec, prepared.prompt)
        except EngineError as exc:
            raise api_error(exc) from None
    return len(prepared.prompt.ids)


async def embedding_ids(spec: ModelSpec, inputs: list[str | tuple[int, ...]]) -> list[tuple]:
    """An embedding request's inputs as token ids: text tokenized by the model's tokenizer on
    a prompt thread, after the character limit; ids as the client sent them. The engine adds
    the model's special tokens to each (engine/embedding/tokens.py)."""
    check_characters(sum(len(i) for i in inputs if isinstance(i, str)), "input")
    if not any(isinstance(i, str) for i in inputs):
        return list(inputs)
    return await _on_prompt_thread(_embedding_ids, spec, inputs)


def _embedding_ids(spec: ModelSpec, inputs: list[str | tuple[int, ...]]) -> list[tuple]:
    vocabulary = vocabularies.get(spec)
    with vocabulary.lock:
        return [tuple(vocabulary.tokenizer(i)) if isinstance(i, str) else i for i in inputs]


async def with_vocabulary(spec: ModelSpec, work: Callable[[Vocabulary], T]) -> T:
    """`work(vocabulary)` on a prompt thread, under the vocabulary's lock: for what reads a
    model's tokenizer without a prompt to prepare (/tokenize, /detokenize), never the
    weights."""
    return await _on_prompt_thread(_with_vocabulary, spec, work)


def _with_vocabulary(spec: ModelSpec, work: Callable[[Vocabulary], T]) -> T:
    vocabulary = vocabularies.get(spec)
    with vocabulary.lock:
        return work(vocabulary)


def _prepared(request: PromptJob, ready: Ready, first: bool) -> JobRequest:
    matcher = ready.matcher
    if matcher is not None and not first:
        matcher = matcher.deep_copy()  # each copy walks the grammar on its own
    return JobRequest(
        request.spec,
        ready.prompt,
        request.params,
        request.echo,
        ready.stop_ids,
        ready.stop_strings,
        matcher,
    )


def _characters(prompt: Any) -> int:
    if isinstance(prompt, ChatPrompt):
        texts = json.dumps([prompt.messages, prompt.tools], ensure_ascii=False, default=str)
        return len(texts) + len(prompt.prefill)
    if isinstance(prompt, TextPrompt):
        return len(prompt.text)
    return 0


def check_characters(total: int, param: str) -> None:
    limit = settings.MAX_REQUEST_PROMPT_CHARS
    if limit and total > limit:
        raise APIError(
            f"This request's prompts hold {total} characters; this server reads at most "
            f"{limit} for one request (MAX_REQUEST_PROMPT_CHARS).",
            param=param,
            code="too_many_prompt_characters",
        )


def _check_tokens(requests: list[JobRequest]) -> None:
    """Every copy counts, as the engine reads each (a prompt with images: the engine counts)."""
    limit = settings.MAX_REQUEST_PROMPT_TOKENS
    total = sum(len(r.prompt.ids) for r in requests if isinstance(r.prompt, TokenPrompt))
    if limit and total > limit:
        raise api_error(too_many_prompt_tokens(total, limit))


def _ready(request: PromptJob) -> Ready:
    """On a prompt thread: the prompt rendered and tokenized, stops, the grammar compiled."""
    try:
        vocabulary = vocabularies.get(request.spec)
        with vocabulary.lock:
            prompt = _tokens(request, vocabulary)
            stop_ids = request.adapter.stop_token_ids(vocabulary.tokenizer, vocabulary.vocab)
            matcher = _grammar(request, vocabulary)
    except EngineError:
        raise
    except Exception as exc:  # what a bad request breaks never reaches the engine
        log.exception("could not prepare a prompt for %s", request.spec.model_id)
        raise EngineError(ErrorKind.INTERNAL, "the prompt could not be rendered") from exc
    return Ready(prompt, stop_ids, tuple(request.adapter.stop_strings()), matcher)


def _tokens(request: PromptJob, vocabulary: Vocabulary) -> Prompt:
    prompt = request.prompt
    if isinstance(prompt, ChatPrompt) and prompt.images:
        text = _template_text(request.adapter, vocabulary.tokenizer, prompt)
        return ImagePrompt(text, prompt.images)
    if isinstance(prompt, ChatPrompt):
        return _chat_tokens(request, vocabulary, prompt)
    if isinstance(prompt, TextPrompt):
        return TokenPrompt(tuple(vocabulary.tokenizer.encode(prompt.text)))
    return prompt  # token ids: the engine checks them against the vocabulary


def _chat_tokens(request: PromptJob, vocabulary: Vocabulary, prompt: ChatPrompt) -> TokenPrompt:
    """The chat prompt's tokens under its overflow policy (engine/overflow.py). A prompt with
    images is never truncated: its images would have to follow their messages out."""

    def render(messages: list[dict]) -> list[int]:
        return _render(request.adapter, vocabulary.tokenizer, replace(prompt, messages=messages))

    ids, left_out = render(prompt.messages), 0
    if prompt.overflow == "truncate_middle":
        context = vocabulary.context_length
        room = reply_room(context, request.params.max_tokens)
        ids, left_out = truncate_middle(prompt.messages, ids, render, context, room)
    return TokenPrompt(tuple(ids), left_out, "messages")


def _render(adapter: Any, tokenizer: Any, prompt: ChatPrompt) -> list[int]:
    try:
        return adapter.render_prompt(
            tokenizer,
            prompt.messages,
            prompt.tools,
            prompt.template_kwargs,
            prompt.prefill,
            prompt.generation_prompt,
        )
    except ChatTemplateMissing as exc:
        raise EngineError(ErrorKind.INVALID_REQUEST, str(exc), "messages") from exc
    except TemplateError as exc:  # the template refused these messages (or kwargs)
        raise _template_refused(exc) from exc


def _template_text(adapter: Any, tokenizer: Any, prompt: ChatPrompt) -> str:
    """A prompt with images as text, the images' placeholders in it: the vision model's
    processor expands them into image tokens (engine/vision/prompt.py)."""
    template = adapter.profile.chat_template or None
    extra = {k: v for k, v in (prompt.template_kwargs or {}).items() if k not in _TEMPLATE_ONLY}
    if prompt.tools:
        extra["tools"] = prompt.tools
    try:
        text = render_template(
            tokenizer,
            prompt.messages,
            chat_template=template,
            add_generation_prompt=True,
            tokenize=False,
            **extra,
        )
    except TemplateError as exc:
        raise _template_refused(exc) from exc
    return text + prompt.prefill


def _template_refused(exc: TemplateError) -> EngineError:
    message = f"The model's chat template could not render this request: {exc}"
    return EngineError(ErrorKind.INVALID_REQUEST, message, "messages")


def _grammar(request: PromptJob, vocabulary: Vocabulary) -> Any:
    grammar = request.params.grammar
    if not grammar:
        return None
    from inference.engine.constraints import compile_grammar
    from inference.engine.grammar_tokens import with_marker_tokens

    return compile_grammar(
        vocabulary.ll_tokenizer, with_marker_tokens(grammar, vocabulary.marker_tokens)
    )


def prepare_now(request: PromptJob) -> JobRequest:
    """`request` prepared on the calling thread, with no request limits: for the engine's
    tests and benchmarks, which hand jobs to the engine without an HTTP request."""
    return _prepared(request, _ready(request), first=True)
