"""Health publishing: the engine's state as an immutable snapshot (state.EngineState), swapped
in by the engine thread and read by any other (health, ready, the dashboard, the supervisor)."""

from __future__ import annotations

from dataclasses import replace

from inference.engine import weights_format
from inference.engine.batching import ModelRunner
from inference.engine.parts import EngineParts, Runner
from inference.engine.pool import LoadedModel
from inference.engine.prefix_disk import PrefixDisk
from inference.engine.state import EngineState, ModelState
from inference.engine.types import BATCH


class StatePublisher:
    """`publish` runs on the engine thread only; `state` and `live_state` on any."""

    def __init__(self, parts: EngineParts, device: str, disk: PrefixDisk | None) -> None:
        self._parts = parts
        self._device = device
        self._disk = disk  # this process's prefix disk tier (prefix_disk.shared), if on
        self.kernels = ""  # decided on the engine thread as it starts
        self.state = EngineState(device, parts.config.pool_budget_bytes)
        # weights_format.describe per loaded model, the loaded ones only: it walks the
        # parameters, and a snapshot is published after every turn of the loop. Each model is
        # held with its words, so that no later model can take its id.
        self._weights: dict[int, tuple[LoadedModel, str]] = {}

    def publish(self) -> None:
        """Swaps in a fresh snapshot; readers on other threads never wait for this one."""
        pool = self._parts.pool
        loaded = pool.loaded()
        self._weights = {id(m): (m, self._weights_of(m)) for m in loaded}
        self.state = EngineState(
            device=self._device,
            budget_bytes=pool.budget,
            kernels=self.kernels,
            models=tuple(self._model_state(m) for m in loaded),
            evictions=pool.evictions,
            prefix_disk=self._disk.state() if self._disk is not None else None,
        )

    def live_state(self) -> EngineState:
        """Any thread: the published state, with the disk tier's counts read now (its writer
        writes while this engine sleeps on an empty inbox, publishing nothing)."""
        state = self.state
        return state if self._disk is None else replace(state, prefix_disk=self._disk.state())

    def _model_state(self, loaded: LoadedModel) -> ModelState:
        model_id = loaded.spec.model_id
        # A LoRA adapter's rows decode in its base's runner (lora.py): each model shows its own.
        base = loaded.base if loaded.base is not None else loaded
        runner = self._parts.runners.get(base.spec.model_id)
        sequences = runner.sequences if runner else []
        queued = runner.waiting if runner else 0
        if isinstance(runner, ModelRunner):
            queued = sum(s.loaded is loaded for s in sequences[:queued])
            sequences = [s for s in sequences if s.loaded is loaded]
        batch = sum(s.job.priority == BATCH for s in sequences)
        batch_queued = sum(s.job.priority == BATCH for s in sequences[:queued])  # waiting first
        prefixes = runner.prefixes_of(model_id) if isinstance(runner, ModelRunner) else None
        drafts = runner.speculation if isinstance(runner, ModelRunner) else None
        # A batch's drafts are counted once, on its base (every row of its models).
        drafts = drafts if loaded.base is None else None
        return ModelState(
            id=loaded.spec.model_id,
            bytes=loaded.nbytes,
            compute_format=loaded.compute_format,
            kernels=loaded.kernels,
            format_reason=loaded.format_reason,
            pinned=loaded.spec.pinned,
            load_seconds=round(loaded.load_seconds, 3),
            last_used=loaded.last_used,
            keep_alive=loaded.keep_alive,
            active_sequences=len(sequences) - queued,
            queued_sequences=queued,
            batch_active_sequences=batch - batch_queued,
            batch_queued_sequences=batch_queued,
            tokens_per_second=round(_rate(runner, model_id), 2) if runner else 0.0,
            # One memory holds a base's prefixes and its adapters': counted on the base.
            prefix_cache_bytes=runner.prefix_cache_bytes if runner and base is loaded else 0,
            prefix_disk_hits=prefixes.stats.disk_hits if prefixes else 0,
            prefix_disk_tokens=prefixes.stats.disk_tokens if prefixes else 0,
            draft_tokens=drafts.drafted if drafts else 0,
            accepted_draft_tokens=drafts.accepted if drafts else 0,
            verify_steps=drafts.steps if drafts else 0,
            replayed_steps=drafts.replays if drafts else 0,
            drafters={k: (v[0], v[1]) for k, v in drafts.drafters.items()} if drafts else {},
            mtp=loaded.mtp_reason,
            mtp_heads=loaded.mtp is not None,
            kv_cache=loaded.kv_cache,
            activations=loaded.activations,
            q6k=loaded.q6k,
            context_length=loaded.context_length,
            weights=self._weights[id(loaded)][1],
        )

    def _weights_of(self, loaded: LoadedModel) -> str:
        held = self._weights.get(id(loaded))
        if held is not None and held[0] is loaded:
            return held[1]
        return weights_format.describe(loaded.config, loaded.model, loaded.compute_format)


def _rate(runner: Runner, model_id: str) -> float:
    """The model's decode rate: its own rows' where its runner serves adapters' too."""
    if isinstance(runner, ModelRunner):
        return runner.tokens_per_second(model_id)
    return runner.tokens_per_second()
