"""POST /v1/messages/count_tokens: the prompt a create would read for the same body, counted."""

from __future__ import annotations

import asyncio

from django.conf import settings

from inference.engine.types import EngineError, SamplingParams
from inference.protocol.anthropic.requests import CountTokensRequest
from inference.protocol.anthropic.responses import TokenCount
from inference.serving.anthropic.plan import plan_messages
from inference.serving.context import RequestContext
from inference.serving.errors import api_error
from inference.serving.generation import TIMEOUT
from inference.serving.pipeline import shape
from inference.serving.prelude import admit
from inference.serving.prepare import count_prompt_tokens
from inference.serving.prompts import PromptJob


async def count_message_tokens(request: CountTokensRequest, ctx: RequestContext) -> TokenCount:
    """The prompt create would read for the same body, counted on the engine (tools, system
    and prefill included): its input_tokens plus cache_read_input_tokens. Under the model's
    truncate_middle policy, what is left after old turns are dropped (leaving room for a
    quarter of the context: count_tokens has no max_tokens)."""
    resolved = await admit(ctx, request.model)
    (prompt,) = (await shape(await plan_messages(request, resolved, ctx), resolved)).prompts
    job = PromptJob(resolved.spec, resolved.adapter, prompt, SamplingParams())
    try:
        async with asyncio.timeout(settings.REQUEST_TIMEOUT):
            return TokenCount(input_tokens=await count_prompt_tokens(ctx, job))
    except EngineError as exc:
        raise api_error(exc) from None
    except TimeoutError:
        raise api_error(TIMEOUT) from None
