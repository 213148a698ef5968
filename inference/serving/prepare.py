"""A request's prompts made ready for the engine: rendered, tokenized and checked against the
prompt limits in a worker thread, once per distinct prompt (n copies share it)."""

from __future__ import annotations

from inference.engine.types import JobRequest
from inference.serving.context import RequestContext


async def count_prompt_tokens(ctx: RequestContext, request: JobRequest) -> int:
    """How many tokens `request`'s prompt takes, prepared as a job of it would be."""
    return await ctx.engine.count_prompt_tokens(request)
