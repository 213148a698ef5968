"""Which family a catalog model belongs to when the admin did not say.

The model itself tells first: its chat template (and special tokens), read from its folder
(inference/adapters/detect.py). Then the families' name patterns, then config.json's
model_type, then a template that shows only its prompt format (ChatML, Llama 3 headers). The
format comes after model_type so that models served by their model_type's family before
detection existed keep it (a SmolLM2-style llama with a ChatML template stays "llama", whose
reader takes Hermes's <tool_call> too); it still beats the bare default."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import try_to_load_from_cache

from catalog.models import CatalogModel, ModelFamily
from inference.adapters.detect import Detection, detect

# The files detection reads: the chat template (transformers' own file, the tokenizer's
# config, a vision model's processor file) and the special tokens (tokenizer.json). A change
# to any of them is a new detection.
FOLDER_FILES = (
    "chat_template.jinja",
    "tokenizer_config.json",
    "chat_template.json",
    "tokenizer.json",
)


@dataclass(frozen=True)
class FamilyChoice:
    family: ModelFamily | None
    reason: str  # how it was chosen, for admin


def detect_family(entry: CatalogModel, families: list[ModelFamily]) -> ModelFamily | None:
    return choose_family(entry, families).family


def choose_family(entry: CatalogModel, families: list[ModelFamily]) -> FamilyChoice:
    """The catalog's own choice; else what the model's template shows; else its names; else
    config's model_type; else a template that shows only its format; else the default."""
    if entry.family_id is not None:
        return FamilyChoice(entry.family, "chosen in the catalog")
    if entry.base_model_id is not None:  # a LoRA adapter is prompted as its base is
        choice = choose_family(entry.base_model, families)
        return FamilyChoice(choice.family, f"its base model's: {choice.reason}")
    by_slug = {family.slug: family for family in families}
    found = model_detection(entry)
    if found and not found.generic and found.slug in by_slug:
        return FamilyChoice(by_slug[found.slug], f"detected: {found.reason}")
    names = (entry.public_id, entry.display_name, entry.location)
    for family in families:
        pattern = family.matching_pattern(*names)
        if pattern is not None:
            return FamilyChoice(family, f"its name matches the pattern {pattern!r}")
    model_type = local_model_type(entry)
    if model_type:
        for family in families:
            if model_type in family.model_types:
                return FamilyChoice(family, f"config.json says model_type {model_type}")
    if found and found.slug in by_slug:
        return FamilyChoice(by_slug[found.slug], f"detected: {found.reason}")
    return FamilyChoice(by_slug.get("default"), "nothing told: the default")


def local_model_type(entry: CatalogModel) -> str | None:
    """config.json's model_type for models on disk; None for hub repos not yet fetched."""
    folder = model_folder(entry)
    if folder is None:
        return None
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    return model_type if isinstance(model_type, str) else None


def model_folder(entry: CatalogModel) -> Path | None:
    """The folder with the model's files: its location, or a hub repo's snapshot once it is in
    the local Hugging Face cache (never fetched from here)."""
    if entry.source != CatalogModel.Source.HUGGING_FACE:
        return Path(entry.location)
    try:
        cached = try_to_load_from_cache(entry.location, "config.json")
    except ValueError:  # not a repo id the hub would take
        return None
    return Path(cached).parent if isinstance(cached, str) else None


# folder -> (its files' stat signature, what they showed): a request only stats the files.
_DETECTED: dict[str, tuple[tuple, Detection | None]] = {}


def model_detection(entry: CatalogModel) -> Detection | None:
    """What the model's own files show (cached per folder until one of them changes)."""
    folder = model_folder(entry)
    if folder is None:
        return None
    signature = _signature(folder)
    known = _DETECTED.get(str(folder))
    if known is not None and known[0] == signature:
        return known[1]
    found = detect(read_chat_template(folder), special_tokens(folder)) if signature else None
    _DETECTED[str(folder)] = (signature, found)
    return found


def _signature(folder: Path) -> tuple:
    stats = []
    for name in FOLDER_FILES:
        try:
            stat = (folder / name).stat()
        except OSError:
            continue
        stats.append((name, stat.st_mtime_ns, stat.st_size))
    return tuple(stats)


def read_chat_template(folder: Path) -> str | None:
    """Every chat template the folder has, joined (Command R keeps a default and a tool_use
    one: the fingerprint may be in either); None when it has none."""
    found: list[str] = []
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        found.append(jinja.read_text(errors="replace"))
    for name in ("tokenizer_config.json", "chat_template.json"):
        found.extend(_templates_in(_read_json(folder / name).get("chat_template")))
    return "\n".join(found) or None


def _templates_in(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):  # [{"name": "default", "template": "…"}, …]
        return [t["template"] for t in value if isinstance(t, dict) and "template" in t]
    return []


def special_tokens(folder: Path) -> Iterator[str]:
    """The tokenizer's added tokens, read only when asked for (tokenizer.json can be large)."""
    decoder = _read_json(folder / "tokenizer_config.json").get("added_tokens_decoder")
    if isinstance(decoder, dict) and decoder:
        tokens = decoder.values()
    else:
        tokens = _read_json(folder / "tokenizer.json").get("added_tokens") or []
    for token in tokens:
        if isinstance(token, dict) and isinstance(token.get("content"), str):
            yield token["content"]


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
