"""The pool's commands, run on the engine thread (through Engine.call, or for the jobs that
need a model): warm, keep_alive, unload, a model loaded here and now, and the models the
loader thread has read joining the pool."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

from inference.engine.parts import EngineParts, Job, Runner
from inference.engine.pool import LoadedModel
from inference.engine.sequence import vision_model
from inference.engine.types import EngineError, ErrorKind, Failed, ImagePrompt, ModelSpec


class PoolCommands:
    """Engine thread only. `publish` swaps in a fresh state: a caller waiting for a load
    reads the state next and sees the model in it."""

    def __init__(self, parts: EngineParts, publish: Callable[[], None]) -> None:
        self._parts = parts
        self._publish = publish

    def warm(self, spec: ModelSpec) -> dict | Future:
        """The model loaded; read on the loader thread (the answer comes when it is read)
        unless it is loaded already or the engine is one rank of a group."""
        parts = self._parts
        if (loaded := parts.pool.current(spec)) is not None:
            return _warmed(loaded, was_loaded=True)
        if parts.link.distributed:
            return _warmed(self.load(spec), was_loaded=False)
        future: Future = Future()
        parts.loads.wait_for(parts.pool, spec, future)
        return future

    def adopt_loads(self, start: Callable[[list[Job]], None]) -> None:
        """Models read since the last turn join the pool; what waited for them starts
        (`start`: the intake's, for jobs)."""
        parts = self._parts
        for outcome, waiting in parts.loads.finished(parts.pool):
            self._publish()
            for waiter in waiting:
                if isinstance(waiter, Future):
                    if isinstance(outcome, EngineError):
                        waiter.set_exception(outcome)
                    else:
                        waiter.set_result(_warmed(outcome, was_loaded=False))
                elif isinstance(outcome, EngineError):
                    for job in waiter:
                        parts.emit(job, Failed(outcome))
                else:
                    start(waiter)

    def count_image_prompt(self, spec: ModelSpec, prompt: ImagePrompt) -> int:
        """A prompt with images' length in tokens, as the model's processor expands it (no
        vision tower run)."""
        from inference.engine.vision.prompt import processed

        return len(processed(prompt, vision_model(self.load(spec)))[0])

    def keep_alive(self, model_id: str, seconds: float | None) -> bool:
        """How long a loaded model stays once idle, as a request said (Ollama's keep_alive):
        seconds, 0 to unload it when its sequences end, negative for never; None: the
        engine's idle TTL again. False when the model is not loaded."""
        return self._parts.pool.keep_alive(model_id, seconds)

    def unload(self, model_id: str) -> bool:
        parts = self._parts
        error = Failed(EngineError(ErrorKind.MODEL_UNAVAILABLE, f"model '{model_id}' was unloaded"))
        for sequence in parts.runners.serving(model_id):  # an adapter's: its rows only
            parts.emit(sequence.job, error)
        return parts.pool.unload(model_id)

    def load(self, spec: ModelSpec) -> LoadedModel:
        """The model, loaded here and now if it is not yet; the supervisor sees a long read
        as loading, not as a wedge."""
        pulse = self._parts.pulse
        pulse.loading = True
        try:
            return self._parts.pool.get(spec)
        finally:
            pulse.loading = False
            pulse.beat()

    def pinned_specs(self) -> list[ModelSpec]:
        return [m.spec for m in self._parts.pool.loaded() if m.spec.pinned]

    def runner(self, loaded: LoadedModel) -> Runner:
        return self._parts.runners.of(loaded, self._parts.config)


def _warmed(loaded: LoadedModel, was_loaded: bool) -> dict:
    return {
        "id": loaded.spec.model_id,
        "bytes": loaded.nbytes,
        "load_seconds": 0.0 if was_loaded else round(loaded.load_seconds, 3),
        "already_loaded": was_loaded,
    }
