"""/api/chat and /api/generate: the one pipeline, in Ollama's dialect, and what Ollama does
beside it: a request with nothing to answer (no prompt, no messages) loads the model, or with
keep_alive 0 unloads it (`ollama stop`); and every request sets how long its model stays
loaded once idle (keep_alive; left out, the server's MODEL_IDLE_TTL)."""

from __future__ import annotations

from operator import methodcaller

from pydantic import BaseModel

from inference.engine.types import EngineError
from inference.protocol.ollama.requests import ChatRequest, GenerateRequest, KeepAlive
from inference.protocol.ollama.responses import AssistantMessage, ChatResponse, GenerateResponse
from inference.serving.context import RequestContext
from inference.serving.control import unload_model, warm_model
from inference.serving.errors import api_error
from inference.serving.ollama.dialect import DIALECT, one_object
from inference.serving.ollama.writer import created_at
from inference.serving.pipeline import answer
from inference.serving.resolve import find_model, resolve_model
from inference.serving.sse import EventStream

Generating = ChatRequest | GenerateRequest


async def answer_ollama(body: Generating, ctx: RequestContext) -> BaseModel | EventStream:
    if _nothing_asked(body):
        return await load_or_unload(body, ctx)
    reply = await answer(DIALECT, body, ctx)
    # Its jobs are admitted (a stream's still run): the model stays loaded until they end,
    # then as long as this request says.
    await keep_alive(body, ctx)
    return reply


def _nothing_asked(body: Generating) -> bool:
    if isinstance(body, ChatRequest):
        return not body.messages
    return not body.prompt and not body.images and not body.system


async def keep_alive(body: KeepAlive, ctx: RequestContext, model_id: str | None = None) -> None:
    """The model's idle TTL as this request says (None: the server's), sent to the engine only
    when that changes it; `model_id`: the catalog id, when the caller has it."""
    seconds = body.keep_alive_seconds()
    loaded = {m.id: m.keep_alive for m in ctx.engine.health().models}
    if seconds is None and not any(ttl is not None for ttl in loaded.values()):
        return  # the usual case: nothing to change, and no catalog lookup for it
    if model_id is None:
        entry = await find_model(body.model, ctx.caller)
        if entry is None:
            return
        model_id = entry.public_id  # `model` may be an alias
    if model_id not in loaded or loaded[model_id] == seconds:
        return
    try:
        await ctx.engine.call(methodcaller("keep_alive", model_id, seconds))
    except EngineError as exc:
        raise api_error(exc) from None


async def load_or_unload(body: Generating, ctx: RequestContext) -> BaseModel | EventStream:
    """Ollama's way to load a model ahead of use, or with keep_alive 0 to unload it."""
    resolved = await resolve_model(body.model, ctx.caller)
    model_id = resolved.entry.public_id
    if body.keep_alive_seconds() == 0:
        await unload_model(ctx.engine, model_id)
        reason = "unload"
    else:
        await warm_model(ctx.engine, model_id)
        await keep_alive(body, ctx, model_id)
        reason = "load"
    reply: BaseModel
    if isinstance(body, ChatRequest):
        message = AssistantMessage()
        reply = ChatResponse(
            model=body.name, created_at=created_at(), message=message, done=True, done_reason=reason
        )
    else:
        reply = GenerateResponse(
            model=body.name, created_at=created_at(), done=True, done_reason=reason
        )
    if not body.stream:
        return reply
    return one_object(reply)
