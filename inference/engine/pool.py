"""Loaded models, least recently used first out, under a byte budget. Engine thread only."""

from __future__ import annotations

import gc
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from inference.engine import compute_format, cpu, lora
from inference.engine.format_verdicts import weights_key
from inference.engine.kv import KVFormat
from inference.engine.loaders import download, load_weights, prepares_compute_format
from inference.engine.sharding import load_sharded
from inference.engine.token_text import TokenText
from inference.engine.types import EngineError, ErrorKind, ModelSpec
from inference.engine.vocabulary import TokenizerFacts, context_length_of

log = logging.getLogger(__name__)


@dataclass
class LoadedModel(TokenizerFacts):
    spec: ModelSpec
    model: Any
    tokenizer: Any
    config: dict
    nbytes: int
    context_length: int
    load_seconds: float = 0.0
    compute_format: str = "stored"
    kernels: bool = False
    format_reason: str = ""
    activations: str = ""  # compute_format.FormatChoice.activations
    q6k: str = ""  # compute_format.FormatChoice.q6k
    draft: Any = None  # the draft model's weights (spec.draft), read with this model's
    mtp: Any = None  # its MTP heads (mtp.head.MtpHeads) where its checkpoint ships them
    mtp_reason: str = ""  # what was found, or why it has none
    active: int = 0  # sequences using it right now: never evicted while > 0
    last_used: float = field(default_factory=time.monotonic)
    # Seconds it stays loaded once idle, as its last request said (Ollama's keep_alive): 0
    # unloads it when its sequences end, negative never; None: the engine's idle TTL.
    keep_alive: float | None = None
    base: LoadedModel | None = None  # a LoRA adapter's base, whose model serves its rows
    # A chat model's adapters (lora.LoRASet): which its model's adapted linears hold, and
    # which adapter each row of a forward serves. None for an adapter and other purposes.
    lora: Any = None
    kv_layout: Any = None  # kv.KVLayout: its cache layers' widths, read once when first needed
    kv_cache: str = ""  # the KV format it computes with, as kv.KVFormat.describe() says

    def idle_ttl(self, default: float) -> float | None:
        """Seconds idle before it is unloaded; None: never (pinned, or no TTL applies)."""
        ttl = self.keep_alive if self.keep_alive is not None else (default or None)
        return None if self.spec.pinned or ttl is None or ttl < 0 else ttl

    @cached_property
    def token_text(self) -> TokenText:
        return TokenText(self.tokenizer)

    @cached_property
    def vocab_size(self) -> int:
        """The ids a prompt, a bias or a draft may hold: the tokenizer's, never past the model's
        embedding rows. A tokenizer that outgrew its model's embedding would have MLX's gather
        read past the rows, which it does not check: garbage, or a segfault that ends the
        process."""
        size = len(self.vocab)
        rows = embedding_rows(self.config)
        return min(size, rows) if rows else size


def embedding_rows(config: dict) -> int:
    """The model's vocabulary size as its config gives it (a multimodal model's in its text
    config); 0 where it gives none."""
    for place in (config, config.get("text_config") or {}):
        rows = place.get("vocab_size") if isinstance(place, dict) else None
        if isinstance(rows, int) and rows > 0:
            return rows
    return 0


def weights_size(spec: ModelSpec) -> int:
    """Bytes of weights on disk, its draft model's included; 0 when unknown (a hub repo not
    yet downloaded)."""
    draft = weights_size(spec.draft) if spec.draft is not None else 0
    if spec.from_hub:
        return draft
    return draft + sum(f.stat().st_size for f in Path(spec.location).glob("*.safetensors"))


def _parameter_bytes(model: Any) -> int:
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def everywhere(group: Any, ok: bool) -> bool:
    """Whether every rank of the group says ok (a collective: every rank must ask)."""
    votes = mx.distributed.all_sum(mx.array(int(ok)), group=group, stream=mx.cpu)
    return votes.item() == group.size()


def _refusal(spec: ModelSpec, failure: Exception) -> EngineError:
    """What the request hears when the model cannot be loaded, the model named."""
    if isinstance(failure, compute_format.ActivationsRefused):
        failure = EngineError(ErrorKind.MODEL_UNAVAILABLE, str(failure))
    if isinstance(failure, EngineError):  # a loader's own refusal says why: kept
        log.warning("loading %s refused: %s", spec.model_id, failure.message)
        return EngineError(failure.kind, f"model '{spec.model_id}': {failure.message}")
    log.error("loading %s failed", spec.model_id, exc_info=failure)
    return EngineError(ErrorKind.MODEL_UNAVAILABLE, f"model '{spec.model_id}' could not be loaded")


Read = tuple[Any, Any, dict, compute_format.FormatChoice]


def read_draft(spec: ModelSpec, tokenizer: Any, room: int, timed: bool) -> Any:
    """A draft model's weights, whole, in the format it will compute in; refused when its
    vocabulary is not the drafted model's (its token ids would mean other text)."""
    if spec.purpose != "chat" or spec.vision or spec.draft is not None:
        raise EngineError(ErrorKind.INVALID_REQUEST, "its draft model must be a text chat model")
    model, draft_tokenizer, _, _ = load_weights(spec)
    if draft_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise EngineError(
            ErrorKind.INVALID_REQUEST,
            f"its draft model '{spec.model_id}' has another vocabulary",
        )
    key = weights_key(spec.location, spec.from_hub, "draft")
    model, _ = compute_format.prepare(
        spec.compute_format, model, room, key=key, timed=timed, activations=spec.activations
    )
    mx.eval(model.parameters())
    return model


def read_mtp(spec: ModelSpec, model: Any, config: dict) -> tuple[Any, str]:
    """The model's MTP heads from its weight files, or None and why (mtp/read.py)."""
    from inference.engine.mtp.read import read_heads

    folder = download(spec.location) if spec.from_hub else Path(spec.location)
    return read_heads(Path(folder), model, config)


@dataclass
class Loading:
    """A model whose weights are being read: what the pool set aside for it, and the read."""

    spec: ModelSpec
    size: int = 0  # bytes on disk, set aside in the pool's budget while it loads
    room: int = 0  # the pool's room for it (compute_format may widen the weights into it)
    group: Any = None
    started: float = field(default_factory=time.monotonic)
    draft: Any = None  # read with the model when its spec names a draft model
    mtp: Any = None  # its MTP heads, read with a text chat model (mtp/read.py)
    mtp_reason: str = ""
    # An adapter's: its base as loaded, or the base's own Loading when it is read along.
    base: LoadedModel | None = None
    base_load: Loading | None = None
    base_read: Read | None = None
    adapter: tuple[dict, dict] | None = None  # its config and LoRA matrices, as read

    def read(self) -> Read:
        """The weights, in the format the model will compute in (this rank's shard of a
        model marked parallel, in a group), and its draft model's into `draft`. Touches no
        pool state: any thread may run it."""
        spec = self.spec
        if spec.base is not None:
            return self._read_adapter()
        if self.group is not None and spec.parallel:
            read = load_sharded(spec, self.group, self.room)
        else:
            read = self._read_whole(spec)
        if spec.draft is not None:
            self.draft = read_draft(spec.draft, read[1], self.room, timed=self.group is None)
        if prepares_compute_format(spec) and self.group is None:
            self.mtp, self.mtp_reason = read_mtp(spec, read[0], read[2])
            if self.mtp is not None and read[3].kernels:  # the head computes as its model does
                cpu.accelerate(self.mtp.head)
        return read

    def _read_whole(self, spec: ModelSpec) -> Read:
        refusal = q6k_refusal(spec)
        model, tokenizer, config, kept = load_weights(spec, q6k_native=refusal is None)
        if not prepares_compute_format(spec):
            reason = "loaded as stored (not an mlx-lm chat model)"
            return model, tokenizer, config, compute_format.FormatChoice("stored", reason, False)
        model, choice = compute_format.prepare(
            spec.compute_format,
            model,
            self.room,
            key=weights_key(spec.location, spec.from_hub),
            timed=self.group is None,
            activations=spec.activations,
        )
        if kept.layers:  # what the Q6_K layers became, and why, beside the format's reason
            what = kept.describe(choice.format, refusal)
            choice = replace(choice, reason=f"{choice.reason}; {what}", q6k=what)
        return model, tokenizer, config, choice

    def _read_adapter(self) -> Read:
        """The base's model (read now if it was not loaded), its tokenizer, config and
        format; the adapter's matrices into `adapter`, attached to the base's linears on the
        engine thread (pool.finish: the base may be decoding meanwhile)."""
        if self.base_load is not None:
            self.base_read = self.base_load.read()
            model, tokenizer, config, choice = self.base_read
        else:
            base = self.base
            model, tokenizer, config = base.model, base.tokenizer, base.config
            choice = compute_format.FormatChoice(
                base.compute_format, base.format_reason, base.kernels, base.activations, base.q6k
            )
        self.adapter = lora.read_adapter(Path(self.spec.location))
        reason = f"its base {self.spec.base.model_id}'s: {choice.reason}"
        return model, tokenizer, config, replace(choice, reason=reason)


def _attached(load: Loading, base: LoadedModel) -> int:
    """The adapter's matrices on its base's linears, the bytes they add (its rows decode in
    the base's batch: lora.py). Engine thread only."""
    config, weights = load.adapter
    if base.lora is None:
        refused = EngineError(ErrorKind.MODEL_UNAVAILABLE, "its base serves no adapters")
        raise _refusal(load.spec, refused)
    try:
        return base.lora.attach(load.spec.model_id, config, weights)
    except EngineError as refusal:
        raise _refusal(load.spec, refusal) from refusal


def _serves_adapters(entry: LoadedModel) -> None:
    """A chat model's LoRA set (lora.py); an adapter's word for its missing MTP head."""
    if entry.base is not None:
        entry.mtp_reason = "a LoRA adapter's rows draft with n-gram lookup only"
    elif entry.spec.purpose == "chat" and prepares_compute_format(entry.spec):
        entry.lora = lora.LoRASet(entry.model)


def q6k_refusal(spec: ModelSpec) -> str | None:
    """Why a model's Q6_K layers (engine/q6k.py) become MLX's 8-bit rather than staying 6-bit
    in the CPU kernels (None: they stay)."""
    if not prepares_compute_format(spec):
        return "not an mlx-lm chat model"
    if spec.compute_format not in ("auto", "quantized"):
        return f"the catalog asks for {spec.compute_format}"
    return cpu.kernel_status().q6k


class ModelPool:
    def __init__(
        self,
        budget_bytes: int,
        on_unload: Callable[[str], None] = lambda model_id: None,
        group: Any = None,
    ) -> None:
        self.budget = budget_bytes
        self._on_unload = on_unload  # lets the engine drop what it keeps for the model
        # A distributed group (engine/lockstep.py): models marked parallel load sharded over
        # it, and every rank must choose the same compute format without timing anything.
        self._group = group
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()
        self._pending = 0  # bytes set aside for models being read (begin -> finish)
        self._held: set[str] = set()  # bases of adapters being read: not evicted meanwhile
        self.evictions = 0  # unloaded to make room or for being idle (not on request)

    def loaded(self) -> list[LoadedModel]:
        return list(self._models.values())

    def loaded_ids(self) -> list[str]:
        # Read from other threads: copying the keys is atomic under the GIL.
        return list(self._models)

    def current(self, spec: ModelSpec) -> LoadedModel | None:
        """The model as loaded for exactly this spec (touched as used), or None."""
        entry = self._models.get(spec.model_id)
        if entry is not None and entry.spec == spec:
            for used in (entry.base, entry):  # an adapter's use is its base's too
                if used is not None:
                    self._models.move_to_end(used.spec.model_id)
                    used.last_used = time.monotonic()
            return entry
        if entry is not None:  # the catalog entry changed since it was loaded
            self.unload(spec.model_id)
        return None

    def get(self, spec: ModelSpec) -> LoadedModel:
        """The model, read here and now if it is not loaded yet."""
        entry = self.current(spec)
        if entry is not None:
            return entry
        try:
            load = self.begin(spec)
        except Exception as exc:
            return self.finish(Loading(spec), exc)
        try:
            outcome: Read | Exception = load.read()
        except Exception as exc:  # finished with its own Loading: what begin set aside is freed
            outcome = exc
        return self.finish(load, outcome)

    def begin(self, spec: ModelSpec) -> Loading:
        """Room made for the model's weights (unloading others: engine thread only); the
        returned Loading's read() may then run on any thread, while the engine steps."""
        if spec.base is not None:
            return self._begin_adapter(spec)
        if not spec.from_hub and not (Path(spec.location) / "config.json").is_file():
            # Never hand a missing local path to mlx-lm: it would try it as a hub repo id.
            raise EngineError(ErrorKind.MODEL_UNAVAILABLE, "its weights are missing on disk")
        size = weights_size(spec)  # a glob of the directory: once
        self._make_room(size + self._pending, spec.model_id)
        load = Loading(spec, size, self._room() - self._pending, self._group)
        self._pending += size
        return load

    def _begin_adapter(self, spec: ModelSpec) -> Loading:
        """An adapter's room: its LoRA matrices, and its base's weights unless loaded."""
        base_spec = spec.base
        if not (Path(spec.location) / lora.WEIGHTS).is_file():
            raise EngineError(ErrorKind.MODEL_UNAVAILABLE, "its adapter is missing on disk")
        if self._group is not None or not prepares_compute_format(base_spec):
            raise EngineError(
                ErrorKind.MODEL_UNAVAILABLE,
                "adapters apply to mlx-lm chat models, outside a distributed group",
            )
        base = self.current(base_spec)
        self._held.add(base_spec.model_id)
        try:
            base_load = None if base is not None else self.begin(base_spec)
            size = weights_size(spec)
            self._make_room(size + self._pending, spec.model_id)
        except BaseException:
            self._held.discard(base_spec.model_id)
            raise
        self._pending += size
        return Loading(spec, size, base=base, base_load=base_load)

    def finish(self, load: Loading, outcome: Read | Exception) -> LoadedModel:
        """On the engine thread: the read weights join the pool, or their failure is raised
        as the refusal the requests hear."""
        if load.spec.base is not None:
            return self._finish_adapter(load, outcome)
        self._pending -= load.size
        failure = outcome if isinstance(outcome, Exception) else None
        # A group's ranks load together or not at all: one rank without the weights (or the
        # room) must not leave the others waiting in the model's collectives.
        if self._group is not None and not everywhere(self._group, failure is None):
            failure = failure or EngineError(
                ErrorKind.MODEL_UNAVAILABLE,
                "it could not be loaded on every rank of the group (see the other ranks' logs)",
            )
        if failure is not None:
            raise _refusal(load.spec, failure) from failure
        return self._adopt(load, outcome)  # type: ignore[arg-type]

    def _finish_adapter(self, load: Loading, outcome: Read | Exception) -> LoadedModel:
        """The adapter joins the pool beside its base (which joins first if read along)."""
        self._pending -= load.size
        self._held.discard(load.spec.base.model_id)
        if load.base_load is not None:
            base_outcome = load.base_read if load.base_read is not None else outcome
            base = self.finish(load.base_load, base_outcome)
        else:
            base = load.base
            if self._models.get(base.spec.model_id) is not base:  # unloaded on request meanwhile
                outcome = EngineError(ErrorKind.MODEL_UNAVAILABLE, "its base was unloaded")
        if isinstance(outcome, Exception):
            raise _refusal(load.spec, outcome) from outcome
        nbytes = _attached(load, base)
        try:
            return self._adopt(load, outcome, base, nbytes)
        except BaseException:
            base.lora.detach(load.spec.model_id)
            raise

    def _adopt(
        self, load: Loading, read: Read, base: LoadedModel | None = None, adapter_bytes: int = 0
    ) -> LoadedModel:
        spec, (model, tokenizer, config, choice) = load.spec, read
        # An adapter computes with its base's model: only its own LoRA matrices count.
        nbytes = adapter_bytes if base is not None else _parameter_bytes(model)
        if load.draft is not None:
            nbytes += _parameter_bytes(load.draft)
        if load.mtp is not None:
            nbytes += _parameter_bytes(load.mtp.head)
        seconds = time.monotonic() - load.started
        entry = LoadedModel(
            spec,
            model,
            tokenizer,
            config,
            nbytes,
            context_length_of(spec, config),
            seconds,
            choice.format,
            choice.kernels,
            choice.reason,
            choice.activations,
            choice.q6k,
            draft=load.draft,
            mtp=load.mtp,
            mtp_reason=load.mtp_reason,
            base=base,
        )
        _serves_adapters(entry)
        if spec.purpose == "chat":
            try:  # refused here, saying why, when its kv_cache cannot apply
                entry.kv_cache = KVFormat.of(entry).describe()
            except EngineError as refusal:
                raise _refusal(spec, refusal) from refusal
        self._models[spec.model_id] = entry
        log.info(
            "loaded %s (%.1f MiB, computing in %s%s: %s) in %.1fs",
            spec.model_id,
            nbytes / 2**20,
            choice.format,
            " with the CPU kernels" if choice.kernels else "",
            choice.reason,
            seconds,
        )
        return entry

    def unload(self, model_id: str) -> bool:
        entry = self._models.pop(model_id, None)
        if entry is None:
            return False
        for adapter in [m for m in self._models.values() if m.base is entry]:
            self.unload(adapter.spec.model_id)  # its rows decode in the base's batch
        self._on_unload(model_id)  # an adapter's rows leave its base's batch first
        if entry.base is not None:  # its matrices leave the base's linears
            entry.base.lora.detach(model_id)
        del entry
        gc.collect()
        mx.clear_cache()
        log.info("unloaded %s", model_id)
        return True

    def _room(self) -> int:
        return self.budget - self._used()

    def _used(self) -> int:
        return sum(m.nbytes for m in self._models.values())

    def idle_models(self, ttl: float) -> list[str]:
        """Unpinned models nobody used for their idle TTL (`ttl`, or their own keep_alive)."""
        now = time.monotonic()
        return [
            m.spec.model_id
            for m in self._models.values()
            if not self._kept(m) and (t := m.idle_ttl(ttl)) is not None and m.last_used <= now - t
        ]

    def _kept(self, entry: LoadedModel) -> bool:
        """Never unloaded to make room nor for idleness: pinned or in use, itself or an
        adapter over it (unloading a base unloads its adapters), or an adapter's base being
        read."""
        if entry.spec.pinned or entry.active > 0 or entry.spec.model_id in self._held:
            return True
        return any(m.base is entry and self._kept(m) for m in self._models.values())

    def next_idle_deadline(self, ttl: float) -> float | None:
        """When the next unpinned model turns idle for its TTL (monotonic clock)."""
        times = [
            m.last_used + t for m in self._models.values() if (t := m.idle_ttl(ttl)) is not None
        ]
        return min(times) if times else None

    def keep_alive(self, model_id: str, seconds: float | None) -> bool:
        """A loaded model's own idle TTL (None: the engine's again); False if not loaded."""
        entry = self._models.get(model_id)
        if entry is None:
            return False
        entry.keep_alive = seconds
        return True

    def _make_room(self, needed: int, model_id: str) -> None:
        if needed > self.budget:
            raise EngineError(
                ErrorKind.MODEL_UNAVAILABLE,
                f"model '{model_id}' needs {needed / 2**30:.1f} GiB, more than the pool's "
                f"budget of {self.budget / 2**30:.1f} GiB",
            )
        evictable = [m for m in self._models.values() if not self._kept(m)]
        for victim in evictable:  # least recently used first
            if self._used() + needed <= self.budget:
                break
            if victim.spec.model_id not in self._models:
                continue  # an adapter unloaded with its base
            log.info("unloading %s to make room for %s", victim.spec.model_id, model_id)
            self.unload(victim.spec.model_id)
            self.evictions += 1
        if self._used() + needed > self.budget:
            raise EngineError(
                ErrorKind.MODEL_UNAVAILABLE,
                f"no room for '{model_id}': the pool's budget is taken by models in use or pinned",
            )
