"""/api/tags, /api/show, /api/ps and /api/version: the catalog and the pool as Ollama lists
them, each with the context it is served with (the catalog's override, else its own). A model
is listed as `id:latest` (requests drop the tag again, protocol/ollama/requests); its details
(format, family, parameter count, quantization) are read from the model's own files
(config.json and the safetensors headers), cached until those files change."""

from __future__ import annotations

import asyncio
import hashlib
import json
import struct
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from apikeys.auth import Caller
from catalog.families import model_folder
from catalog.models import CatalogModel
from inference.engine.state import EngineHealth, ModelState
from inference.engine.vocabulary import context_length_of
from inference.protocol.errors import model_not_found
from inference.protocol.ollama.requests import LATEST, ShowRequest
from inference.protocol.ollama.responses import (
    ListedModel,
    ListResponse,
    ModelDetails,
    ProcessResponse,
    RunningModel,
    ShowResponse,
    VersionResponse,
)
from inference.serving.resolve import find_model

# What /api/version answers: the Ollama API version this server speaks (clients check it to
# decide which fields they may send, e.g. `think`, `format` as a schema).
OLLAMA_API_VERSION = "0.12.0"
# Element size in bits of the safetensors dtypes.
_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "U32": 32, "I8": 8}
_BITS |= {"U8": 8, "I16": 16, "U16": 16, "BOOL": 8, "F8_E4M3": 8, "F8_E5M2": 8}


def _header(path: Path) -> dict:
    with path.open("rb") as file:
        (size,) = struct.unpack("<Q", file.read(8))
        return json.loads(file.read(size))


@lru_cache(maxsize=256)
def _file_facts(folder: str, signature: tuple) -> tuple[dict, int, int]:
    """config.json, the weights' bytes and their parameter count (quantized matrices, stored
    packed into uint32, counted as the weights they pack)."""
    path = Path(folder)
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    bits = (config.get("quantization") or {}).get("bits") if isinstance(config, dict) else None
    size = parameters = 0
    for weights in sorted(path.glob("*.safetensors")):
        size += weights.stat().st_size
        for name, tensor in _header(weights).items():
            if name == "__metadata__" or name.endswith((".scales", ".biases")):
                continue
            count = 1
            for dim in tensor["shape"]:
                count *= dim
            if tensor["dtype"] == "U32" and bits:
                count = count * 32 // bits
            parameters += count
    return (config if isinstance(config, dict) else {}), size, parameters


def file_facts(entry: CatalogModel) -> tuple[dict, int, int]:
    folder = model_folder(entry)
    if folder is None or not folder.is_dir():
        return {}, 0, 0  # a hub repo not fetched yet
    files = [folder / "config.json", *sorted(folder.glob("*.safetensors"))]
    signature = tuple((f.name, s.st_size, s.st_mtime_ns) for f in files if (s := _stat(f)))
    try:
        return _file_facts(str(folder), signature)
    except (OSError, ValueError, KeyError, struct.error):
        return {}, 0, 0


def _stat(path: Path):
    try:
        return path.stat()
    except OSError:
        return None


def parameter_size(count: int) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f}".removesuffix(".0") + unit
    return str(count) if count else ""


def quantization_level(config: dict) -> str:
    bits = (config.get("quantization") or {}).get("bits")
    if bits:
        return f"Q{bits}"
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "")
    return {"float16": "F16", "bfloat16": "BF16", "float32": "F32"}.get(dtype, dtype.upper())


def details(entry: CatalogModel, config: dict, parameters: int) -> ModelDetails:
    family = str(config.get("model_type") or (entry.family.slug if entry.family_id else ""))
    return ModelDetails(
        format="safetensors",
        family=family,
        families=[family] if family else None,
        parameter_size=parameter_size(parameters),
        quantization_level=quantization_level(config),
    )


def digest(entry: CatalogModel) -> str:
    """Ollama's digest names a manifest; ours names the catalog row as last saved."""
    stamp = f"{entry.public_id}\n{entry.location}\n{entry.updated.isoformat()}"
    return hashlib.sha256(stamp.encode()).hexdigest()


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def listed_model(entry: CatalogModel) -> ListedModel:
    config, size, parameters = file_facts(entry)
    name = entry.public_id + LATEST
    return ListedModel(
        name=name,
        model=name,
        modified_at=_iso(entry.updated),
        size=size,
        digest=digest(entry),
        details=details(entry, config, parameters),
    )


async def _enabled(caller: Caller) -> list[CatalogModel]:
    # Every relation spec() reads (a LoRA's base, a draft), so the event loop never queries.
    entries = CatalogModel.objects.select_related(*CatalogModel.RELATED).filter(enabled=True)
    return [e async for e in entries if caller.may_use(e.public_id)]


async def list_tags(caller: Caller) -> ListResponse:
    entries = await _enabled(caller)
    return ListResponse(models=await asyncio.to_thread(lambda: [listed_model(e) for e in entries]))


async def show_model(request: ShowRequest, caller: Caller) -> ShowResponse:
    entry = await find_model(request.model, caller) or await find_model(
        request.model, caller, "embedding"
    )
    if entry is None:
        raise model_not_found(request.name)
    config, _, parameters = await asyncio.to_thread(file_facts, entry)
    sampling = {"temperature": entry.default_temperature, "top_p": entry.default_top_p}
    sampling["num_predict"] = entry.default_max_tokens
    parameters_text = "\n".join(f"{k} {v}" for k, v in sampling.items() if v is not None)
    capabilities = ["embedding"] if entry.purpose == CatalogModel.Purpose.EMBEDDING else []
    if not capabilities:
        capabilities = ["completion", "tools", *(["vision"] if entry.vision else [])]
    return ShowResponse(
        modelfile=f"# served by mlx-django-server from {entry.location}\nFROM {entry.public_id}\n",
        parameters=parameters_text,
        template=_chat_template(entry),
        details=details(entry, config, parameters),
        model_info=_model_info(config, parameters, context_length_of(entry.spec(), config)),
        capabilities=capabilities,
        modified_at=_iso(entry.updated),
    )


def _model_info(config: dict, parameters: int, context_length: int) -> dict:
    """A few of config.json's facts under Ollama's general.* and <arch>.* keys; the context is
    the one served (the catalog's override, else the model's own), as clients size prompts by
    it."""
    arch = str(config.get("model_type") or "")
    info: dict = {"general.architecture": arch, "general.parameter_count": parameters}
    info[f"{arch}.context_length"] = context_length
    for ours, theirs in (
        ("hidden_size", "embedding_length"),
        ("num_hidden_layers", "block_count"),
    ):
        if ours in config:
            info[f"{arch}.{theirs}"] = config[ours]
    return info


def _chat_template(entry: CatalogModel) -> str:
    """The model's Jinja chat template (Ollama shows a Go template; clients only display it)."""
    folder = model_folder(entry)
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text()) if folder else {}
    except (OSError, ValueError):
        return ""
    template = config.get("chat_template") if isinstance(config, dict) else None
    return template if isinstance(template, str) else ""


def _expires_at(model: ModelState, ttl: float | None) -> str:
    if ttl is None or ttl < 0 or model.pinned:
        when = datetime.now(UTC) + timedelta(days=365 * 100)  # never: far away, as Ollama says it
    else:
        when = datetime.now(UTC) + timedelta(seconds=max(0.0, ttl - model.idle_seconds))
    return _iso(when)


async def running_models(health: EngineHealth, caller: Caller) -> ProcessResponse:
    """/api/ps: the loaded models (in memory: size_vram is all of it, as on a Mac)."""
    entries = {e.public_id: e for e in await _enabled(caller)}
    running = []
    for model in health.models:
        entry = entries.get(model.id)
        if entry is None:
            continue
        config, _, parameters = await asyncio.to_thread(file_facts, entry)
        name = model.id + LATEST
        ttl = model_ttl(model)
        running.append(
            RunningModel(
                name=name,
                model=name,
                size=model.bytes,
                digest=digest(entry),
                details=details(entry, config, parameters),
                expires_at=_expires_at(model, ttl),
                size_vram=model.bytes,
                # What the engine serves: the catalog's context, else the model's own.
                context_length=model.context_length or context_length_of(entry.spec(), config),
            )
        )
    return ProcessResponse(models=running)


def model_ttl(model: ModelState) -> float | None:
    """The model's idle TTL in seconds: its last request's keep_alive, else the server's
    MODEL_IDLE_TTL; None: it never idles out."""
    if model.keep_alive is not None:
        return model.keep_alive
    return settings.MODEL_IDLE_TTL or None


def version() -> VersionResponse:
    return VersionResponse(version=OLLAMA_API_VERSION)
