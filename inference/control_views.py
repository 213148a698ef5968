"""/control: the operator's API on the running server (admin token, or a staff session with
the catalog.operate_pool permission)."""

from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpRequest

from inference.edge import POOL_OPERATOR, endpoint
from inference.protocol.errors import APIError
from inference.serving.context import RequestContext
from inference.serving.control import pool_document, unload_model, warm_model


@endpoint("GET", auth=POOL_OPERATOR)
async def pool(request: HttpRequest, ctx: RequestContext) -> dict:
    return await pool_document(ctx.engine.health())


@endpoint("POST", auth=POOL_OPERATOR)
async def engine_fault(request: HttpRequest, ctx: RequestContext) -> dict:
    """Recovery drills: {"kind": "crash"} or {"kind": "stall", "seconds": N}. Off unless
    ENGINE_FAULT_INJECTION is set."""
    if not settings.ENGINE_FAULT_INJECTION:
        raise APIError("Fault injection is off on this server.", status=404, code="unknown_url")
    try:
        fault = json.loads(request.body)
        ctx.engine.inject_fault(fault["kind"], float(fault.get("seconds", 0)))
    except (ValueError, KeyError, TypeError):
        raise APIError('Send {"kind": "crash"} or {"kind": "stall", "seconds": N}.') from None
    return {"injected": fault["kind"]}


@endpoint("POST", auth=POOL_OPERATOR)
async def warm(request: HttpRequest, ctx: RequestContext, model_id: str) -> dict:
    return await warm_model(ctx.engine, model_id)


@endpoint("POST", auth=POOL_OPERATOR)
async def unload(request: HttpRequest, ctx: RequestContext, model_id: str) -> dict:
    return await unload_model(ctx.engine, model_id)
