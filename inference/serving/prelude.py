"""What every endpoint that serves a model does first, in one place: refuse once the server
drains, resolve the model the request names (for the purpose the endpoint serves), and name
that model on the request's record (its metric label)."""

from __future__ import annotations

from inference.serving.context import RequestContext
from inference.serving.drain import refuse_if_draining
from inference.serving.resolve import ResolvedModel, resolve_model


async def admit(ctx: RequestContext, model_id: str, purpose: str = "chat") -> ResolvedModel:
    """The request's model, resolved for `purpose` ("chat", "embedding" or "rerank"), after
    the drain check; the record names it from here on, whatever fails after."""
    refuse_if_draining()
    resolved = await resolve_model(model_id, ctx.caller, purpose)
    if ctx.record is not None:
        ctx.record.model = resolved.entry.public_id
    return resolved
