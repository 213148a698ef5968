"""Reranking models: a query and each document read together, one relevance score per pair.

`tokens.py` turns (query, documents) into the ids each model reads (serving's threads, without
the weights), `load.py` reads the weights (engine thread), `runner.py` scores a bounded padded
batch of pairs per engine step beside the chat and embedding runners."""
