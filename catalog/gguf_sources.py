"""GGUF models that Ollama and LM Studio already downloaded, found where they keep them.

Pure functions of the folders they are given (settings.OLLAMA_MODELS_DIR and
LMSTUDIO_MODELS_DIR in practice). Nothing here converts anything or touches MLX: the admin's
page lists with these, and the `import_gguf` command resolves a name with them.

Ollama: <models>/manifests/<host>/<namespace>/<model>/<tag> is a JSON manifest whose layers
name blobs by digest; blob sha256:<hex> is the file <models>/blobs/sha256-<hex>.
LM Studio: <models>/<publisher>/<repo>/<file>.gguf, as downloaded from Hugging Face.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from catalog.gguf_header import quantization_from_header, quantization_from_name
from inference.conversion.gguf import family_from_template

OLLAMA_HOST = "registry.ollama.ai"
OLLAMA_NAMESPACE = "library"
OLLAMA_TAG = "latest"
MEDIA = "application/vnd.ollama.image."
# Layers read, or knowingly left out (the license text, the vision projector).
_KNOWN_LAYERS = {"model", "template", "system", "params", "license", "projector"}
# One name part on disk: a folder or file name, never "..", never a path of its own.
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(:\d+)?$")  # a registry may have a port
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


class SourceError(Exception):
    """A model that cannot be found or imported, and exactly why."""


@dataclass(frozen=True)
class Found:
    """One line of a folder's listing; `problem` says why it cannot be imported."""

    source: str  # "ollama" or "lmstudio"
    name: str  # what --ollama / --lmstudio take
    path: Path | None  # the GGUF file
    size: int
    quantization: str | None
    problem: str = ""

    @property
    def slug(self) -> str:
        return default_model_id(self.source, self.name)


# --- Ollama -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OllamaName:
    host: str
    namespace: str
    model: str
    tag: str

    @classmethod
    def parse(cls, name: str) -> OllamaName:
        """`llama3.2`, `llama3.2:1b`, `user/model:tag`, `host/namespace/model:tag`."""
        rest, tag = name.strip(), ""
        if ":" in rest.split("/")[-1]:  # a tag; a registry's port comes before the first "/"
            rest, tag = rest.rsplit(":", 1)
        parts = rest.split("/")
        if not 1 <= len(parts) <= 3:
            raise SourceError(f"{name!r} is not an Ollama model name (model, user/model[:tag])")
        defaults = [OLLAMA_HOST, OLLAMA_NAMESPACE][: 3 - len(parts)]
        host, namespace, model = [*defaults, *parts]
        parsed = cls(host, namespace, model, tag or OLLAMA_TAG)
        if not (_HOST.match(host) and all(map(_PART.match, (namespace, model, parsed.tag)))):
            raise SourceError(f"{name!r} is not an Ollama model name (model, user/model[:tag])")
        return parsed

    def __str__(self) -> str:
        """As `ollama list` shows it: the default registry and namespace left out."""
        if self.host != OLLAMA_HOST:
            short = f"{self.host}/{self.namespace}/{self.model}"
        elif self.namespace != OLLAMA_NAMESPACE:
            short = f"{self.namespace}/{self.model}"
        else:
            short = self.model
        return f"{short}:{self.tag}"

    def manifest(self, models_dir: Path) -> Path:
        return models_dir / "manifests" / self.host / self.namespace / self.model / self.tag


@dataclass(frozen=True)
class OllamaModel:
    name: str  # e.g. "llama3.2:latest"
    gguf: Path  # the model layer's blob
    size: int
    template: str = ""
    system: str = ""
    params: dict = field(default_factory=dict)
    quantization: str | None = None
    notes: tuple[str, ...] = ()  # what was left out, for the operator

    @property
    def family_slug(self) -> str | None:
        # Ollama's Go templates hold the same turn markers as the Jinja ones.
        return family_from_template(self.template)

    def catalog_defaults(self) -> dict:
        """The CatalogModel fields Ollama's parameters and system prompt give."""
        params = self.params
        defaults = {
            "default_temperature": _number(params.get("temperature")),
            "default_top_p": _number(params.get("top_p")),
            "system_prompt": self.system or None,
        }
        predict = _number(params.get("num_predict"))
        if predict is not None and predict > 0:  # -1 (no limit) and -2 (fill context) are not
            defaults["default_max_tokens"] = int(predict)
        return {key: value for key, value in defaults.items() if value is not None}

    def ignored_params(self) -> list[str]:
        used = {"temperature", "top_p", "num_predict"}
        return sorted(set(self.params) - used)


def _number(value: object) -> float | None:
    if isinstance(value, list) and len(value) == 1:  # Ollama writes some parameters as lists
        value = value[0]
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def read_ollama(models_dir: Path, name: str) -> OllamaModel:
    """The named model's manifest, resolved to its GGUF blob and its small text layers."""
    parsed = OllamaName.parse(name)
    path = parsed.manifest(models_dir)
    if not path.is_file():
        raise SourceError(
            f"Ollama has no model {str(parsed)!r} in {models_dir} (no manifest {path}); "
            "`ollama list` shows the names, `ollama pull` fetches one"
        )
    layers, config = _manifest_layers(path)
    return _ollama_model(models_dir, str(parsed), layers, config)


def _manifest_layers(path: Path) -> tuple[list[dict], dict]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"cannot read the manifest {path}: {exc}") from None
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise SourceError(f"the manifest {path} is not JSON: {exc}") from None
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
        raise SourceError(f"the manifest {path} has no list of layers")
    for layer in layers:
        if not isinstance(layer.get("mediaType"), str) or not _DIGEST.match(
            str(layer.get("digest"))
        ):
            raise SourceError(f"the manifest {path} has a layer without mediaType or digest")
    config = manifest.get("config")
    return layers, config if isinstance(config, dict) else {}


def _ollama_model(models_dir: Path, name: str, layers: list[dict], config: dict) -> OllamaModel:
    kinds: dict[str, list[dict]] = {}
    for layer in layers:
        kinds.setdefault(layer["mediaType"].removeprefix(MEDIA), []).append(layer)
    if "adapter" in kinds:
        raise SourceError(
            f"{name} has a LoRA adapter layer ({MEDIA}adapter): adapters are not supported; "
            "import its base model instead"
        )
    models = kinds.get("model", [])
    if len(models) != 1:
        raise SourceError(f"{name}: its manifest has {len(models)} model layers, not one")
    gguf = _blob(models_dir, name, models[0])
    notes = []
    if "projector" in kinds:
        notes.append("its vision projector is not imported: the model will read text only")
    unknown = sorted(set(kinds) - _KNOWN_LAYERS)
    if unknown:
        notes.append(f"layers not imported: {', '.join(unknown)}")
    params = _json_layer(models_dir, name, kinds.get("params", []))
    return OllamaModel(
        name=name,
        gguf=gguf,
        size=models[0].get("size") or gguf.stat().st_size,
        template=_text_layer(models_dir, name, kinds.get("template", [])),
        system=_text_layer(models_dir, name, kinds.get("system", [])),
        params=params,
        quantization=_ollama_quantization(models_dir, name, config, gguf),
        notes=tuple(notes),
    )


def _blob(models_dir: Path, name: str, layer: dict) -> Path:
    digest = layer["digest"]
    path = models_dir / "blobs" / f"sha256-{_DIGEST.match(digest)[1]}"
    if not path.is_file():
        kind = layer["mediaType"].removeprefix(MEDIA)
        raise SourceError(
            f"{name}: the blob of its {kind} layer is missing ({path}, {digest}); "
            f"`ollama pull {name}` fetches it again"
        )
    size = layer.get("size")
    if isinstance(size, int) and path.stat().st_size != size:
        raise SourceError(
            f"{name}: the blob {path} has {path.stat().st_size} bytes, its manifest says {size} "
            "(an interrupted download?)"
        )
    return path


def _text_layer(models_dir: Path, name: str, layers: list[dict]) -> str:
    """The last of the layers of a kind (as Ollama reads them), or "" when there is none."""
    if not layers:
        return ""
    path = _blob(models_dir, name, layers[-1])
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{name}: cannot read the blob {path}: {exc}") from None


def _json_layer(models_dir: Path, name: str, layers: list[dict]) -> dict:
    text = _text_layer(models_dir, name, layers)
    try:
        params = json.loads(text) if text else {}
    except ValueError as exc:
        raise SourceError(f"{name}: its params layer is not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise SourceError(f"{name}: its params layer is not a JSON object")
    return params


def _ollama_quantization(models_dir: Path, name: str, config: dict, gguf: Path) -> str | None:
    # Ollama's config blob states it ("file_type": "Q4_K_M"); the GGUF header otherwise.
    if _DIGEST.match(str(config.get("digest"))):
        path = models_dir / "blobs" / f"sha256-{_DIGEST.match(config['digest'])[1]}"
        try:
            file_type = json.loads(path.read_text()).get("file_type")
        except (OSError, ValueError, AttributeError):
            file_type = None
        if isinstance(file_type, str) and file_type:
            return file_type
    return quantization_from_header(gguf)


def list_ollama(models_dir: Path) -> list[Found]:
    """Every manifest in the folder, the broken ones with their problem."""
    root = models_dir / "manifests"
    found = []
    for manifest in sorted(root.glob("*/*/*/*")):
        if not manifest.is_file() or manifest.name.startswith("."):
            continue
        host, namespace, model, tag = manifest.relative_to(root).parts
        name = str(OllamaName(host, namespace, model, tag))
        try:
            entry = read_ollama(models_dir, name)
        except SourceError as exc:
            found.append(Found("ollama", name, None, 0, None, problem=str(exc)))
            continue
        found.append(Found("ollama", name, entry.gguf, entry.size, entry.quantization))
    return found


# --- LM Studio --------------------------------------------------------------------------------


def is_projector(path: Path) -> bool:
    return path.name.lower().startswith("mmproj")


def read_lmstudio(models_dir: Path, name: str) -> Path:
    """PUBLISHER/REPO/FILE.gguf, or PUBLISHER/REPO when the repo holds one model file."""
    parts = name.strip().strip("/").split("/")
    if len(parts) not in (2, 3) or not all(map(_PART.match, parts)):
        raise SourceError(f"{name!r} is not an LM Studio model name (PUBLISHER/REPO[/FILE.gguf])")
    folder = models_dir / parts[0] / parts[1]
    if not folder.is_dir():
        raise SourceError(f"LM Studio has no model {'/'.join(parts[:2])} in {models_dir}")
    files = sorted(p for p in folder.glob("*.gguf") if p.is_file() and not is_projector(p))
    if len(parts) == 3:
        path = folder / parts[2]
        if not path.is_file():
            listed = ", ".join(p.name for p in files) or "none"
            raise SourceError(f"{folder} has no file {parts[2]} (GGUF files there: {listed})")
        if is_projector(path):
            raise SourceError(f"{path.name} is a vision projector (mmproj), not a model")
        return _whole(path)
    models = {_SPLIT.sub(".gguf", p.name) for p in files}
    if not files:
        raise SourceError(f"{folder} holds no GGUF model file")
    if len(models) > 1:
        names = ", ".join(p.name for p in files)
        raise SourceError(f"{name} holds several GGUF files; name one as {name}/FILE.gguf: {names}")
    return _whole(files[0])


def _whole(path: Path) -> Path:
    split = _SPLIT.search(path.name)
    if split:
        raise SourceError(
            f"{path.name} is part {int(split[1])} of a GGUF split into {int(split[2])} files: "
            "split GGUFs are not supported (llama.cpp's `llama-gguf-split --merge` joins them)"
        )
    return path


def list_lmstudio(models_dir: Path) -> list[Found]:
    found = []
    for path in sorted(models_dir.glob("*/*/*.gguf")):
        if not path.is_file() or is_projector(path):
            continue
        name = "/".join(path.relative_to(models_dir).parts)
        quantization = quantization_from_name(path.name) or quantization_from_header(path)
        try:
            _whole(path)
            problem = ""
        except SourceError as exc:
            problem = str(exc)
        found.append(
            Found("lmstudio", name, path, path.stat().st_size, quantization, problem=problem)
        )
    return found


# --- Ids --------------------------------------------------------------------------------------


def default_model_id(source: str, name: str) -> str:
    """A catalog id from the name: `llama3.2:latest` → llama3.2, `user/m:q4` → user-m-q4,
    LM Studio's `pub/repo/Model-Q4_K_M.gguf` → model-q4_k_m."""
    if source == "ollama":
        parsed = OllamaName.parse(name)
        base = str(parsed).removesuffix(f":{OLLAMA_TAG}")
    else:
        base = Path(name).stem if name.lower().endswith(".gguf") else name.split("/")[-1]
    slug = re.sub(r"[^a-z0-9._]+", "-", base.lower())
    slug = re.sub(r"-{2,}", "-", slug).strip("-._")
    return slug[:128].rstrip("-._") or "model"
