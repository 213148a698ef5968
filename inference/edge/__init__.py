"""The edge: where every HTTP request enters. One `@endpoint(...)` declaration per view states
its methods, its body model, who may call it and the dialect its errors are written in; the
order of those checks, the request's context and what is released when it ends live here."""

from inference.edge.auth import API_KEY, PLAYGROUND, POOL_OPERATOR, PUBLIC, STAFF_OR_TOKEN, Auth
from inference.edge.dialects import OPENAI, Dialect
from inference.edge.endpoint import endpoint

__all__ = [
    "API_KEY",
    "OPENAI",
    "PLAYGROUND",
    "POOL_OPERATOR",
    "PUBLIC",
    "STAFF_OR_TOKEN",
    "Auth",
    "Dialect",
    "endpoint",
]
