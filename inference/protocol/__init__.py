"""Wire formats as pydantic models, one package per dialect (`openai/` today), plus the
dialect-neutral APIError that serving raises and the edge renders in the endpoint's dialect."""
