"""The generation engine: one thread owns every MLX call.

Modules that import MLX (pool, sequence, sampling, worker) are imported only by the engine
thread, so importing this package from serving code does not import MLX.
"""
