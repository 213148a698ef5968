"""POST /v1/rerank (and /rerank, /v2/rerank): serving's scores (rerank.py) sorted best first,
in Jina's and Cohere's shape."""

from __future__ import annotations

from inference.protocol.openai.rerank import (
    APIVersion,
    BilledUnits,
    RerankedText,
    RerankMeta,
    RerankRequest,
    RerankResponse,
    RerankResult,
    RerankUsage,
)
from inference.serving.context import RequestContext
from inference.serving.ids import completion_id
from inference.serving.rerank import score_documents


async def answer_rerank(
    request: RerankRequest, ctx: RequestContext, api_version: str = "1"
) -> RerankResponse:
    texts = request.texts()
    scored = await score_documents(
        request.model, request.query, texts, request.instruction or "", ctx
    )
    tokens = scored.prompt_tokens
    return RerankResponse(
        id=completion_id("rerank"),
        model=request.model,
        results=_ranked(scored.scores, texts, request.top_n, request.return_documents),
        usage=RerankUsage(prompt_tokens=tokens, total_tokens=tokens),
        meta=RerankMeta(
            api_version=APIVersion(version=api_version),
            billed_units=BilledUnits(input_tokens=tokens),
        ),
    )


def _ranked(
    scores: list[float], texts: list[str], top_n: int | None, with_documents: bool
) -> list[RerankResult]:
    """Best first; ties keep the documents' order (a stable sort)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: top_n or len(scores)]
    return [
        RerankResult(
            index=i,
            relevance_score=scores[i],
            document=RerankedText(text=texts[i]) if with_documents else None,
        )
        for i in order
    ]
