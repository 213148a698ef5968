"""OpenAI's chat completions and legacy completions: their requests into engine jobs, and
engine events into their responses and chunk streams."""
