"""OpenAI's Files and Batch API and Anthropic's Message Batches, on the serving side: the
endpoints' work (files.py, openai_batches.py, anthropic_batches.py), a batch's input checked
(validate.py), and the runner that executes its lines through the same serving code as the
HTTP endpoints (runner.py, lines.py), writing their outcomes (finish.py). The rows are the
`batches` app's; this room sits above serving, beside the views."""
