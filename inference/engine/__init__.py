"""The generation engine: one thread owns every MLX call.

Outside that thread only `handle.py` (the way in), `state.py` (the health snapshot), `types.py`
(jobs, events, errors) and `config.py` are imported; none of them imports MLX. Modules that do
(pool, sequence, sampling, batching, worker) are imported by the engine side alone.
"""
