"""POST /tokenize, /detokenize and /apply-template: a chat model's tokenizer and chat template,
as serving itself uses them, read without the weights (engine/vocabulary.py) on a prompt
thread. A conversation is rendered exactly as chat renders it (the same plan, catalog system
prompt, tools, thinking switch and overflow policy), so its tokens are the ones chat reads."""

from __future__ import annotations

from dataclasses import replace

from inference.engine.token_text import TokenText
from inference.engine.types import ImagePrompt, SamplingParams
from inference.engine.vocabulary import Vocabulary
from inference.protocol.errors import APIError
from inference.protocol.openai.chat import ChatCompletionRequest
from inference.protocol.openai.tokenize import (
    ApplyTemplateRequest,
    ApplyTemplateResponse,
    ChatTemplateFields,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
    TokenPiece,
)
from inference.serving.context import RequestContext
from inference.serving.openai.plan import plan_chat_completion
from inference.serving.pipeline import shape
from inference.serving.prelude import admit
from inference.serving.prepare import prepare_requests, with_vocabulary
from inference.serving.prompts import PromptJob
from inference.serving.resolve import ResolvedModel, find_model


async def tokenize(body: TokenizeRequest, ctx: RequestContext) -> TokenizeResponse:
    resolved = await _resolved(body.model, ctx)
    text = body.text()
    if text is None:
        ids = await chat_ids(body, resolved, ctx)
    else:
        special = body.special_tokens()
        ids = await with_vocabulary(resolved.spec, lambda v: _encode(v, text, special))
    return await with_vocabulary(resolved.spec, lambda v: _tokenized(v, ids, body))


async def detokenize(body: DetokenizeRequest, ctx: RequestContext) -> DetokenizeResponse:
    resolved = await _resolved(body.model, ctx)
    text = await with_vocabulary(resolved.spec, lambda v: _decode(v, body.tokens))
    return DetokenizeResponse(content=text, prompt=text)


async def apply_template(body: ApplyTemplateRequest, ctx: RequestContext) -> ApplyTemplateResponse:
    resolved = await _resolved(body.model, ctx)
    ids = await chat_ids(body, resolved, ctx)
    text = await with_vocabulary(resolved.spec, lambda v: _decode(v, ids))
    context = await with_vocabulary(resolved.spec, lambda v: v.context_length)
    return ApplyTemplateResponse(prompt=text, tokens=ids, count=len(ids), max_model_len=context)


async def _resolved(model: str, ctx: RequestContext) -> ResolvedModel:
    if not model and await find_model(model, ctx.caller) is None:
        raise APIError(
            "model is required: this server has no default model for unknown ids.",
            param="model",
            code="missing_model",
        )
    return await admit(ctx, model)


async def chat_ids(
    body: ChatTemplateFields, resolved: ResolvedModel, ctx: RequestContext
) -> list[int]:
    """The conversation's tokens as /v1/chat/completions would hand them to the engine."""
    request = ChatCompletionRequest(
        model=body.model,
        messages=body.messages or [],
        tools=body.tools,
        chat_template_kwargs=body.chat_template_kwargs,
    )
    (prompt,) = (await shape(await plan_chat_completion(request, resolved, ctx), resolved)).prompts
    prompt = replace(prompt, generation_prompt=body.add_generation_prompt)  # type: ignore[arg-type]
    job = PromptJob(resolved.spec, resolved.adapter, prompt, SamplingParams())
    (prepared,) = await prepare_requests([job])
    if isinstance(prepared.prompt, ImagePrompt):
        # Only the vision model's processor knows what an image expands to, and it is read
        # with the weights.
        raise APIError(
            "A conversation with images cannot be tokenized without loading the model.",
            param="messages",
            code="images_not_supported",
        )
    return list(prepared.prompt.ids)


def _encode(vocabulary: Vocabulary, text: str, special: bool) -> list[int]:
    return list(vocabulary.tokenizer.encode(text, add_special_tokens=special))


def _decode(vocabulary: Vocabulary, ids: list[int]) -> str:
    size = vocabulary.vocab_size
    for index, token in enumerate(ids):
        if not 0 <= token < size:
            raise APIError(
                f"tokens[{index}] is {token}, outside the model's vocabulary (0 to {size - 1}).",
                param="tokens",
                code="invalid_token_id",
            )
    # Special tokens written out: the text is what the model reads, markers included.
    return vocabulary.tokenizer.decode(ids, skip_special_tokens=False)


def _tokenized(vocabulary: Vocabulary, ids: list[int], body: TokenizeRequest) -> TokenizeResponse:
    tokens: list[int] | list[TokenPiece] = ids
    if body.with_pieces:
        text = TokenText(vocabulary.tokenizer)
        tokens = [TokenPiece(id=i, piece=_piece(text(i)[1])) for i in ids]
    strs = vocabulary.tokenizer.convert_ids_to_tokens(ids) if body.return_token_strs else None
    return TokenizeResponse(
        tokens=tokens, count=len(ids), max_model_len=vocabulary.context_length, token_strs=strs
    )


def _piece(raw: bytes) -> str | list[int]:
    """llama.cpp's piece: the text, or its bytes when they are not UTF-8 on their own."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)
