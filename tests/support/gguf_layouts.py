"""Ollama's and LM Studio's model folders as they are on disk, built around the demo GGUF.

Ollama: manifests/<host>/<namespace>/<model>/<tag> (JSON, Docker distribution manifest v2)
naming its config and layers by the sha256 of their content, each stored as
blobs/sha256-<hex>. LM Studio: <publisher>/<repo>/<file>.gguf. The GGUF itself is hardlinked
(copied across file systems); its digest is computed once per test session.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from pathlib import Path

MEDIA = "application/vnd.ollama.image."

# Ollama's template for SmolLM2 (ChatML), as `ollama show smollm2 --template` prints it.
SMOLLM_TEMPLATE = """{{- if .Messages }}
{{- if or .System .Tools }}<|im_start|>system
{{- if .System }}
{{ .System }}
{{- end }}
{{- end }}<|im_end|>
{{ range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
<|im_start|>{{ .Role }}
{{ .Content }}{{ if not $last }}<|im_end|>
{{ end }}
{{- if and (ne .Role "assistant") $last }}<|im_end|>
<|im_start|>assistant
{{ end }}
{{- end }}
{{- else }}
{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{ if .Prompt }}<|im_start|>user
{{ .Prompt }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}"""
SMOLLM_PARAMS = {
    "stop": ["<|im_start|>", "<|im_end|>"],
    "temperature": 0.2,
    "top_p": 0.9,
    "num_predict": 256,
    "num_ctx": 8192,
}
SMOLLM_SYSTEM = "You are a terse assistant. Answer in one sentence."
LICENSE = "Apache License, Version 2.0"


@functools.cache
def sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        return
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copyfile(source, target)


def blob(models: Path, media_type: str, content: bytes | Path) -> dict:
    """Stores content as Ollama does and returns its manifest entry."""
    if isinstance(content, Path):
        hexdigest, size = sha256_of_file(content), content.stat().st_size
        link_or_copy(content, models / "blobs" / f"sha256-{hexdigest}")
    else:
        hexdigest, size = hashlib.sha256(content).hexdigest(), len(content)
        path = models / "blobs" / f"sha256-{hexdigest}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return {"mediaType": media_type, "digest": f"sha256:{hexdigest}", "size": size}


def ollama_layers(models: Path, gguf: Path, **texts: str | dict) -> list[dict]:
    """The model layer, then template=, system=, params= (a dict), license=... layers."""
    layers = [blob(models, MEDIA + "model", gguf)]
    for kind, text in texts.items():
        data = json.dumps(text) if isinstance(text, dict) else text
        layers.append(blob(models, MEDIA + kind, data.encode()))
    return layers


def write_manifest(models: Path, name: str, layers: list[dict], file_type: str = "Q4_1") -> Path:
    """name: "model:tag", "user/model:tag" or "host/namespace/model:tag"."""
    rest, tag = name.rsplit(":", 1)
    parts = rest.split("/")
    host, namespace, model = ["registry.ollama.ai", "library"][: 3 - len(parts)] + parts
    config = {
        "model_format": "gguf",
        "model_family": "llama",
        "model_families": ["llama"],
        "model_type": "134.52M",
        "file_type": file_type,
        "architecture": "amd64",
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": blob(
            models,
            "application/vnd.docker.container.image.v1+json",
            json.dumps(config).encode(),
        ),
        "layers": layers,
    }
    path = models / "manifests" / host / namespace / model / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


def add_smollm(models: Path, gguf: Path, name: str = "smollm2:latest") -> Path:
    """The demo model as `ollama pull smollm2:135m` leaves it (under the given name)."""
    layers = ollama_layers(
        models,
        gguf,
        template=SMOLLM_TEMPLATE,
        system=SMOLLM_SYSTEM,
        params=SMOLLM_PARAMS,
        license=LICENSE,
    )
    return write_manifest(models, name, layers)


def add_lmstudio_file(models: Path, name: str, content: bytes | Path) -> Path:
    """name: publisher/repo/file.gguf; content: a GGUF to link, or a few bytes of stand-in."""
    path = models / name
    if isinstance(content, Path):
        link_or_copy(content, path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return path
