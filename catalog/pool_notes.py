"""What the admin says about a catalog model the pool holds: what it really runs with (weights,
KV cache, context), and what saving its entry does to it. The pool keeps a loaded model while
its entry's load settings (its ModelSpec, the seam's LoadSettings) stay the same; a request for
it after they change unloads it and loads it again (inference/engine/pool.py, current())."""

from __future__ import annotations

from catalog.pool_seam import LoadedModel, LoadSettings


def running_with(state: LoadedModel) -> str:
    """Weights format, KV cache and context as the engine loaded them."""
    weights = state.compute_format
    if state.activations:
        weights = f"{weights}, {state.activations} activations"
    if state.q6k:
        weights = f"{weights}; {state.q6k}"
    kv = state.kv_cache or "none (not a generating model)"
    context = f"{state.context_length} tokens" if state.context_length else "-"
    return f"weights: {weights} · KV cache: {kv} · context: {context}"


def saved_note(
    state: LoadedModel | None, before: LoadSettings | None, after: LoadSettings, enabled: bool
) -> str | None:
    """What saving did to the model as loaded (None when it is not loaded). `before` is the
    entry's load settings as they were, `after` as saved. Each starts with "Model": the admin
    capitalises a message's first letter, which would misspell a lower-case id."""
    if state is None or before is None:
        return None
    if before.model_id != after.model_id:
        return (
            f"Model {before.model_id} is loaded under its old id: that copy stays in memory until "
            f"room is needed or it idles out; {after.model_id} loads on its next request."
        )
    if not enabled:
        return (
            f"Model {after.model_id} is loaded but now disabled: clients get 404 for it. Unload it "
            "to free its memory."
        )
    if before != after:
        return (
            f"Model {after.model_id} is loaded with the old settings; its load settings changed, "
            "so its next request unloads it and loads it again with the new ones."
        )
    return (
        f"Model {after.model_id} is loaded; the new settings apply from its next request, without "
        "reloading it."
    )
