"""Converts a GGUF file into an MLX model directory, one tensor at a time.

The directory holds config.json (with per-module quantization), model.safetensors,
tokenizer.json, tokenizer_config.json and gguf_import.json (what each tensor became and the
error that added), so mlx-lm loads it like any MLX model. Peak memory is the output plus a
block of rows of one tensor: nothing reads the whole source at once.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from inference.adapters.detect import detect
from inference.conversion.gguf_architecture import Architecture, Hyper
from inference.conversion.gguf_config import main_layers, model_config
from inference.conversion.gguf_file import GGUFFile, TensorInfo, UnsupportedGGUF, open_gguf
from inference.conversion.gguf_registry import ARCHITECTURES, architecture_of
from inference.conversion.gguf_tensors import (
    GROUP,
    Q6K_GROUP,
    Q6K_MODE,
    Q6K_SUPER,
    SUPPORTED_TYPES,
    ErrorStats,
    Plan,
    as_affine,
    common_plan,
    convert_blocks,
    output_layout,
    plan_for,
)
from inference.conversion.gguf_tokenizer import (
    build_tokenizer,
    eog_token_ids,
    special_token_ids,
    tokenizer_config,
)
from inference.conversion.safetensors_out import SafetensorsOut

__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "WEIGHT_FORMATS",
    "ConvertedModel",
    "UnsupportedGGUF",
    "convert_gguf",
    "family_from_template",
    "inspect_gguf",
]

SUPPORTED_ARCHITECTURES = set(ARCHITECTURES)
WEIGHT_FORMATS = ("quantized", "float16", "float32")
REPORT_FILE = "gguf_import.json"
OWNER_FILE = ".import-pid"

# Chat-template markers that tell which family a model belongs to.
FAMILY_MARKERS = {
    "<|im_start|>": "chatml",
    "<|eot_id|>": "llama",
    "[INST]": "mistral",
    "<start_of_turn>": "gemma",
}

Progress = Callable[[Iterable], Iterable]


@dataclass(frozen=True)
class GGUFSummary:
    architecture: str
    name: str
    tensor_types: dict[str, int]


@dataclass(frozen=True)
class ConvertedModel:
    path: Path
    name: str
    family_slug: str | None
    context_length: int
    report: dict


class Step:
    """A named unit of work, for the progress bar (`import_gguf` shows `__name__`)."""

    def __init__(self, name: str, run: Callable[[], None]) -> None:
        self.__name__, self._run = name, run

    def __call__(self) -> None:
        self._run()


def inspect_gguf(path: Path) -> GGUFSummary:
    """Reads the header only and refuses what the converter cannot handle, naming it."""
    file = open_gguf(path)
    _check(file)
    types = Counter(t.type_name for t in file.tensors)
    return GGUFSummary(file.metadata["general.architecture"], _name(file), dict(types))


def _check(file: GGUFFile) -> Architecture:
    arch = architecture_of(file)
    unsupported = sorted({t.type_name for t in file.tensors} - SUPPORTED_TYPES)
    if unsupported:
        raise UnsupportedGGUF(
            f"tensor types {', '.join(unsupported)} are not supported "
            f"(supported: {', '.join(sorted(SUPPORTED_TYPES))})"
        )
    layers = main_layers(file, arch)
    for tensor in arch.tensors(file):
        arch.mlx_name(tensor.name, layers)  # refuses unknown tensors before any work
    if "tokenizer.ggml.tokens" not in file.metadata:
        raise UnsupportedGGUF("the file has no tokenizer (tokenizer.ggml.tokens)")
    return arch


def _name(file: GGUFFile) -> str:
    return file.metadata.get("general.name") or file.path.stem


def convert_gguf(
    source: Path,
    destination: Path,
    progress: Progress = lambda it: it,
    weights: str = "quantized",
) -> ConvertedModel:
    """Writes into a temporary sibling directory, then renames: never a half-written model.

    weights: "quantized" keeps each tensor quantized (exactly where MLX has the same format,
    re-quantized otherwise); "float16"/"float32" dequantize everything ("keep float")."""
    if weights not in WEIGHT_FORMATS:
        raise UnsupportedGGUF(f"weights {weights!r}: choose one of {', '.join(WEIGHT_FORMATS)}")
    file = open_gguf(source)
    arch = _check(file)
    if destination.exists():
        raise FileExistsError(f"{destination} already exists")
    destination.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_imports(destination.parent)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}-", dir=destination.parent))
    (staging / OWNER_FILE).write_text(str(os.getpid()))
    try:
        converted = _Conversion(file, arch, staging, weights).run(progress)
        (staging / OWNER_FILE).unlink()
        staging.chmod(0o755)  # mkdtemp made it private
        staging.rename(destination)
    except BaseException:  # KeyboardInterrupt too: leave nothing behind
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return replace(converted, path=destination)


def remove_abandoned_imports(folder: Path) -> None:
    """A killed import (SIGKILL, power loss) cannot clean up after itself: its staging folder
    names its process, and the next import into the same folder removes it once that is gone."""
    for owner in folder.glob(f".*/{OWNER_FILE}"):
        try:
            os.kill(int(owner.read_text()), 0)
        except ProcessLookupError:
            shutil.rmtree(owner.parent, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue  # alive under another user, or not ours to judge


@dataclass(frozen=True)
class _Planned:
    """One GGUF tensor's MLX name and fate."""

    name: str
    plan: Plan
    is_norm: bool
    row_offset: int = 0  # where its rows start in an output several tensors fill
    # Or where runs of its rows go there: (first source row, first output row, count).
    segments: tuple[tuple[int, int, int], ...] | None = None
    # Runs of its columns back in the checkpoint's order (Architecture.columns), or None.
    columns: tuple[int, ...] | None = None

    def places(self, first_row: int, count: int) -> list[tuple[int, int, int]]:
        """(start in the block, output row, count) for the block of rows at first_row."""
        if self.segments is None:
            return [(0, self.row_offset + first_row, count)]
        places = []
        for source, output, length in self.segments:
            start, end = max(source, first_row), min(source + length, first_row + count)
            if start < end:
                places.append((start - first_row, output + start - source, end - start))
        return places

    @property
    def module(self) -> str:
        return self.name.rsplit(".", 1)[0]

    @property
    def key(self) -> str:
        """What config.json's quantization and the report name it by."""
        return self.module if self.plan.quantized else self.name

    def output_name(self, suffix: str) -> str:
        return self.name if suffix == "weight" else f"{self.module}.{suffix}"


class _Conversion:
    def __init__(self, file: GGUFFile, arch: Architecture, out: Path, weights: str) -> None:
        self.file, self.arch, self.out, self.weights = file, arch, out, weights
        self.layers = main_layers(file, arch)
        self.hyper = Hyper(file, arch.gguf_name)
        self.planned: dict[str, _Planned] = {}  # by GGUF tensor name
        self.out_file: SafetensorsOut | None = None
        self.errors: dict[str, ErrorStats] = {}  # by module

    def run(self, progress: Progress) -> ConvertedModel:
        every = self.arch.tensors(self.file)
        tensors = [t for t in every if self.arch.mlx_name(t.name, self.layers)]
        steps = [Step("tokenizer", self.tokenizer), Step("config", self.config)]
        steps += [Step("plan", lambda: self.plan(tensors))]
        steps += [Step(t.name, lambda t=t: self.tensor(t)) for t in tensors]
        steps += [Step("finish", self.finish)]
        try:
            for step in progress(steps):  # cheap refusals (tokenizer, config) come first
                step()
        finally:
            if self.out_file is not None:
                self.out_file.close()
        template = self.file.metadata.get("tokenizer.chat_template") or ""
        return ConvertedModel(
            self.out,
            _name(self.file),
            family_from_template(template),
            self.config_json["max_position_embeddings"],
            self.report,
        )

    def tokenizer(self) -> None:
        build_tokenizer(self.file.metadata).save(str(self.out / "tokenizer.json"))

    def config(self) -> None:
        vocab_size = len(self.file.metadata["tokenizer.ggml.tokens"])
        embeddings = self.file.tensor("token_embd.weight")
        if embeddings is not None:
            vocab_size = embeddings.shape[0]  # llama.cpp's converters may pad or trim it
        self.config_json = model_config(self.file, self.arch, vocab_size)
        self.config_json.update(_special_ids(self.file.metadata))
        settings = tokenizer_config(self.file.metadata, self.config_json)
        (self.out / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))

    def plan(self, tensors: list[TensorInfo]) -> None:
        """Every tensor's fate and place in the output, before any is converted. Tensors
        with one MLX name (Granite's shared expert: gate, then up) fill it one after the
        other, in the architecture's order, with one plan."""
        groups: dict[str, list[tuple[TensorInfo, _Planned]]] = {}
        for tensor in map(self.arch.restore_shape, tensors):
            planned = self._plan_one(tensor)
            groups.setdefault(planned.name, []).append((tensor, planned))
        layout = {}
        for group in groups.values():
            group.sort(key=lambda item: self.arch.part_of(item[0].name))
            plan = common_plan([planned.plan for _, planned in group])
            offset = 0
            for tensor, planned in group:
                segments = self.arch.segments(self.hyper, tensor.name)
                planned = replace(planned, plan=plan, row_offset=offset, segments=segments)
                self.planned[tensor.name] = planned
                offset += tensor.shape[0]
            rows = (offset,) if len(group) > 1 else ()
            shaped = self.arch.part_shape(self.file, group[0][0])
            for suffix, (dtype, shape) in output_layout(shaped, plan).items():
                layout[planned.output_name(suffix)] = (dtype, rows + shape[len(rows) :])
        self.out_file = SafetensorsOut(self.out / "model.safetensors", layout)

    def _plan_one(self, tensor: TensorInfo) -> _Planned:
        name = self.arch.mlx_name(tensor.name, self.layers)
        module, kind = name.rsplit(".", 1)
        is_norm = module.rsplit(".", 1)[-1].endswith("norm")
        # 3-D: stacked experts, which mlx-lm's SwitchLinear quantizes per expert row
        quantizable = kind == "weight" and len(tensor.shape) in (2, 3) and not is_norm
        quantizable = quantizable and not self.arch.keeps_float(tensor.name)
        order = self.arch.columns(self.hyper, tensor.name)
        # columns move in whole quantization groups, or the tensor stays float
        quantizable = quantizable and not (order and (tensor.columns // len(order)) % GROUP)
        plan = plan_for(tensor, self.weights, quantizable)
        if order and (tensor.columns // len(order)) % Q6K_SUPER:  # Q6_K's blocks move whole
            plan = as_affine(plan)
        return _Planned(name, plan, is_norm, columns=order)

    def tensor(self, tensor: TensorInfo) -> None:
        tensor = self.arch.restore_shape(tensor)
        planned = self.planned[tensor.name]
        transform = self.arch.transform(tensor.name)
        if planned.is_norm and self.arch.norm_offset:
            offset = self.arch.norm_offset
            transform = lambda values: values - offset  # noqa: E731
        error = ErrorStats()
        if planned.plan.quantized:  # one module's parts add up
            error = self.errors.setdefault(planned.module, error)
        blocks = convert_blocks(self.file.path, tensor, planned.plan, error, transform)
        for first_row, arrays in blocks:
            if planned.columns:
                arrays = {s: _reorder_columns(a, planned.columns) for s, a in arrays.items()}
            count = next(iter(arrays.values())).shape[0]
            for start, output_row, length in planned.places(first_row, count):
                for suffix, array in arrays.items():
                    part = array[start : start + length] if length < count else array
                    self.out_file.write(planned.output_name(suffix), output_row, part)

    def finish(self) -> None:
        self.out_file.close()  # complete before config.json says the model is there
        quantization = quantization_config(self.plans)
        if quantization:
            self.config_json["quantization"] = quantization
        (self.out / "config.json").write_text(json.dumps(self.config_json, indent=2))
        (self.out / REPORT_FILE).write_text(json.dumps(self.report, indent=2))

    @property
    def plans(self) -> dict[str, Plan]:
        return {planned.key: planned.plan for planned in self.planned.values()}

    @property
    def report(self) -> dict:
        return import_report(self.file.path, self.weights, self.plans, self.errors)


def _reorder_columns(array, order: tuple[int, ...]):
    """The last axis as len(order) equal runs, output run i taken from source run order[i]:
    for quantized arrays too (packed codes, scales, biases), whose runs are whole groups."""
    import mlx.core as mx

    shape = array.shape
    runs = array.reshape(*shape[:-1], len(order), shape[-1] // len(order))
    return mx.take(runs, mx.array(order), axis=-2).reshape(shape)


def _special_ids(metadata: dict) -> dict:
    """BOS as llama.cpp resolves it, and every token that ends generation there (SmolLM2:
    <|im_end|>, <|endoftext|>, <reponame>): mlx-lm stops on each id of eos_token_id."""
    ids, ends = special_token_ids(metadata), eog_token_ids(metadata)
    eos = [ids["eos"]] if ids["eos"] is not None else []
    eos += [token for token in ends if token not in eos]
    return {"bos_token_id": ids["bos"], "eos_token_id": eos[0] if len(eos) == 1 else eos or None}


def quantization_config(plans: dict[str, Plan]) -> dict | None:
    """mlx-lm's per-module quantization, and the most common bits as the default."""
    per_module = {
        module: {"group_size": Q6K_GROUP if plan.mode == Q6K_MODE else GROUP, "bits": plan.bits}
        | ({"mode": plan.mode} if plan.mode != "affine" else {})
        for module, plan in plans.items()
        if plan.quantized
    }
    if not per_module:
        return None
    # The default is MLX's own (Q6_K's layout is the engine's: engine/q6k.py).
    affine = [q["bits"] for q in per_module.values() if q.get("mode") != Q6K_MODE] or [8]
    common = Counter(affine).most_common(1)[0][0]
    return {"group_size": GROUP, "bits": common, **per_module}


def import_report(source: Path, weights: str, plans: dict, errors: dict) -> dict:
    """Per source type: what it became and the re-quantization error, weighted by size."""
    by_type: dict[str, dict] = {}
    for name, plan in plans.items():
        target = f"{plan.bits}-bit" if plan.quantized else plan.dtype
        if plan.quantized and plan.mode != "affine":
            target = plan.mode  # "mxfp4": MLX's mode of that name
        entry = by_type.setdefault(
            plan.source, {"became": target, "exact": plan.exact or not plan.quantized}
        )
        entry["tensors"] = entry.get("tensors", 0) + 1
        if name in errors:
            stats = errors[name]
            entry["_abs"] = entry.get("_abs", 0.0) + stats.abs_error
            entry["_weight"] = entry.get("_weight", 0.0) + stats.abs_weight
            entry["max_abs_error"] = max(entry.get("max_abs_error", 0.0), stats.max_error)
    for entry in by_type.values():
        total = entry.pop("_weight", 0.0)
        entry["mean_relative_error"] = entry.pop("_abs", 0.0) / total if total else 0.0
    return {"source": str(source), "weights": weights, "group_size": GROUP, "types": by_type}


def family_from_template(template: str) -> str | None:
    """The family the embedded chat template points to (adapters/detect.py: Qwen3.5 from its
    `<function=`, not just ChatML), else its turn markers (Ollama's Go templates too)."""
    found = detect(template, ())
    if found is not None:
        return found.slug
    return next((slug for marker, slug in FAMILY_MARKERS.items() if marker in template), None)
