"""Request and response shapes of POST /v1/rerank (also /rerank and /v2/rerank): Jina's and
Cohere's, which vLLM and llama.cpp's server serve too. Documents are strings or objects with
`text` (Jina, Cohere v1); results come best first, each naming its document's index."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from inference.protocol.openai.chat import OnlyPresent
from inference.protocol.wire import RequestModel


class RerankDocument(RequestModel):
    model_config = ConfigDict(extra="allow")

    text: str


class RerankRequest(RequestModel):
    # Cohere's rank_fields, max_chunks_per_doc, max_tokens_per_doc and the like are accepted
    # and ignored: a document is cut only where the model's own limit is.
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    query: str = Field(min_length=1)
    documents: list[str | RerankDocument] = Field(min_length=1)
    top_n: int | None = Field(default=None, ge=1)  # more than the documents: all of them
    return_documents: bool = True  # Jina's and vLLM's default
    # An extension for decoder rerankers (Qwen3-Reranker's <Instruct>): what relevance means.
    instruction: str | None = None

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


class RerankedText(BaseModel):
    text: str


class RerankResult(OnlyPresent):
    index: int
    relevance_score: float
    document: RerankedText | None = None


class RerankUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class BilledUnits(BaseModel):
    search_units: int = 1
    input_tokens: int


class APIVersion(BaseModel):
    version: str


class RerankMeta(BaseModel):
    """Cohere's `meta`: its SDKs read it; one search unit per request, as Cohere bills up to
    100 documents."""

    api_version: APIVersion
    billed_units: BilledUnits


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: RerankMeta
