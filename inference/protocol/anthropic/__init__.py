"""Anthropic's Messages API on the wire: requests, responses, stream events, its error body."""
