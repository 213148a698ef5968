"""POST /v1/responses and its stored responses (OpenAI's Responses API): a request and the
chain of responses before it become a chat prompt; the engine's text becomes output items,
whole or as typed stream events; finished responses are kept in storedresponses."""
