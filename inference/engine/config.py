from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    """Knobs of the engine; runtime.py fills them from Django settings."""

    pool_budget_bytes: int = 8 * 2**30
    # Sequences decoded together per model; newcomers wait in the queue beyond it.
    max_batch: int = 32
    # Prompts prefilled together, and tokens per prefill chunk: a long prompt is prefilled in
    # chunks between decode steps, so running streams keep flowing.
    prefill_batch: int = 8
    prefill_step: int = 512
    # Bytes of reusable prompt KV cache kept per model (0 turns prefix reuse off).
    prompt_cache_bytes: int = 2 * 2**30
    # Unpinned models unused this many seconds are unloaded (0: never).
    idle_ttl: float = 0.0
