"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's requests into engine jobs,
and engine events into its messages and stream events."""
