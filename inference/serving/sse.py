from pydantic import BaseModel

DONE = "data: [DONE]\n\n"


def sse_event(payload: BaseModel, exclude: set[str] | None = None) -> str:
    return f"data: {payload.model_dump_json(exclude=exclude)}\n\n"
