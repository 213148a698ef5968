"""POST /v1/responses and its stored responses (OpenAI's Responses API): a request and the
chain of responses before it become the neutral plan (plan.py); the engine's text becomes
output items, whole or as numbered typed stream events (writer.py, output.py); finished
responses are kept in storedresponses (store.py) and read back (retrieve.py). `DIALECT`
(dialect.py) holds the plan builder and the reply writer with the dialect's error body,
framing and stream end."""

from inference.serving.responses.dialect import DIALECT

__all__ = ["DIALECT"]
