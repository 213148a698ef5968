from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    """Knobs of the engine; runtime.py fills them from Django settings."""

    pool_budget_bytes: int = 8 * 2**30
    # Sequences decoded together per model; newcomers wait in the queue beyond it.
    max_batch: int = 32
    # The share of a step that reading prompts may take while sequences decode (see
    # scheduling.PrefillPacer), and the most prompt tokens one step reads.
    prefill_share: float = 0.5
    prefill_step: int = 2048
    # Prompt tokens of one request (all its sequences); 0 for no limit.
    max_request_prompt_tokens: int = 0
    # Bytes of reusable prompt KV cache kept per model (0 turns prefix reuse off).
    prompt_cache_bytes: int = 2 * 2**30
    # The prefix cache's disk tier (engine/prefix_disk.py): its folder ("" turns it off), the
    # bytes it may hold (0 turns it off), and the shortest prompt worth a file.
    prefix_cache_dir: str = ""
    prefix_cache_disk_bytes: int = 8 * 2**30
    prefix_cache_disk_min_tokens: int = 512
    # Sequences that may wait for a decode slot before new requests are refused (429).
    max_queued: int = 256
    # Batch-priority work (scheduling.BatchLimits): the share of max_batch it may hold while no
    # interactive work is there, the slots it may hold beside interactive work, and its own
    # queue's cap (admission.py).
    batch_share: float = 0.75
    batch_beside: int = 0
    max_queued_batch: int = 64
    # Unpinned models unused this many seconds are unloaded (0: never).
    idle_ttl: float = 0.0
    # The file where the compute format measured at a load is kept for later starts
    # (engine/format_verdicts.py; "" keeps verdicts in memory only).
    compute_format_verdicts: str = ""
    # The CPU kernels (engine/cpu/) and their threads per operation (0: one per core).
    cpu_kernels: bool = True
    cpu_kernel_threads: int = 0
