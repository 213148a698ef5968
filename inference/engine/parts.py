"""What the engine's pieces share (worker.Engine owns them; turns.py, intake.py,
pool_commands.py and publishing.py each work on them): its config, its group link, the pool,
each loaded model's runner, the loader thread's reads and the thread's pulse."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.embedding.runner import EmbeddingRunner
from inference.engine.loading import Loads
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.rerank.runner import RerankRunner
from inference.engine.types import EmbeddingJob, Event, GenerationJob

Job = GenerationJob | EmbeddingJob
Runner = ModelRunner | EmbeddingRunner
# Which runner steps a loaded model, by what it is for (chat models: ModelRunner).
RUNNERS: dict[str, type[EmbeddingRunner]] = {"embedding": EmbeddingRunner, "rerank": RerankRunner}


class Runners(dict[str, Runner]):
    """Each loaded model's runner, by model id, made when the model first has work. A dict,
    so the loop, the publisher and the turn decision read it as one."""

    def of(self, loaded: LoadedModel, config: EngineConfig) -> Runner:
        """The model's runner; a fresh one when the model was loaded again since. A LoRA
        adapter's rows decode in its base's (engine/lora.py)."""
        loaded = loaded.base if loaded.base is not None else loaded
        runner = self.get(loaded.spec.model_id)
        if runner is None or runner.loaded is not loaded:
            kind = RUNNERS.get(loaded.spec.purpose, ModelRunner)
            runner = self[loaded.spec.model_id] = kind(loaded, config)
        return runner

    def drop(self, model_id: str) -> None:
        """The pool unloaded the model (or its batch broke): its runner goes, closed."""
        runner = self.pop(model_id, None)
        if runner is not None:
            runner.close()
            return
        for runner in self.values():  # an adapter's rows leave its base's batch
            if isinstance(runner, ModelRunner):
                runner.drop_adapter(model_id)

    def serving(self, model_id: str) -> list:
        """The sequences of the model: its runner's, or an adapter's rows in its base's."""
        runner = self.get(model_id)
        if runner is not None:
            return runner.sequences
        rows = (r.sequences for r in self.values() if isinstance(r, ModelRunner))
        return [s for sequences in rows for s in sequences if s.adapter == model_id]


@dataclass
class Pulse:
    """What the supervisor's check (Engine.problem) reads: when the loop last turned, whether
    it sleeps for lack of work, and whether it is loading weights (which may legitimately
    take minutes)."""

    heartbeat: float = field(default_factory=time.monotonic)
    idle: bool = True
    loading: bool = False

    def beat(self) -> None:
        self.heartbeat = time.monotonic()


@dataclass
class EngineParts:
    """One engine's shared state. `config` is read through this object at each use (never
    copied into a piece), so that a config swapped on the engine reaches every piece."""

    config: EngineConfig
    link: Any  # lockstep.Solo or a group's link
    pool: ModelPool
    runners: Runners
    loads: Loads
    pulse: Pulse
    emit: Callable[[Job, Event], None]  # a job's event to its sink (Engine._emit)
