"""The format a model computes in once loaded: its stored one, or float32 on Linux CPUs.

On a GPU the stored format is fastest. On a CPU, MLX's own quantized and float16/bfloat16
matmuls are scalar loops, so without the CPU kernels (kernels/) `auto` dequantizes a model to
float32 for OpenBLAS when that fits the pool's budget. With the kernels, the stored 4- and
8-bit weights are read at memory speed and several times smaller: `auto` keeps them when the
kernels take every quantized layer; where some are left to MLX's path (other bit widths,
MX/NV float modes) it times decode steps at load (`measure`) and keeps the faster format (the
stored one when float32 does not fit), a verdict later loads reuse (format_verdicts: across
restarts when the engine keeps a file). Either way the kernels' fused norms, RoPE and
attention are swapped in.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import dequantize_model

from inference import blas
from inference.engine import cpu
from inference.engine.format_verdicts import Verdict, Verdicts

log = logging.getLogger(__name__)

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
QUANTIZED = cpu.QUANTIZED_LAYERS
MEASURE = "measure"  # choose() leaves auto to prepare() (untimed, kept, or timed)
# The load-time measurement: batch sizes, decode steps timed at each (per format), and the
# float32 bytes of the decoder layers converted for it.
PROBE_BATCHES = (1, 8)
PROBE_STEPS = 12
PROBE_BYTES = 32 * 2**20


@dataclass(frozen=True)
class FormatChoice:
    format: str  # "stored", a dtype name, or MEASURE
    reason: str
    kernels: bool = False  # swap in the CPU kernels' layers
    # How the kernels' direct integer path rounds activations ("15bit", "8bit"); "" where no
    # quantized layer computes in the kernels (float formats, a GPU, no kernels).
    activations: str = ""
    # What a GGUF import's Q6_K layers became (q6k.Q6KLoad.describe); "" where it has none.
    q6k: str = ""


class ActivationsRefused(ValueError):
    """8bit activations asked for where the kernels' integer path does not run."""


def float32_bytes(model: nn.Module) -> int:
    """What the model would take in float32, computed from the packed shapes before converting."""
    quantized = {name: m for name, m in model.named_modules() if isinstance(m, QUANTIZED)}
    total = 0
    for path, array in tree_flatten(model.parameters()):
        owner, _, leaf = path.rpartition(".")
        module = quantized.get(owner)
        if module is None:
            total += array.size
        elif leaf == "weight":
            total += array.nbytes * 8 // module.bits  # values, in either layout (MLX's, x8)
        elif leaf not in ("scales", "biases"):
            total += array.size
    return total * 4


def is_quantized(model: nn.Module) -> bool:
    return any(isinstance(m, QUANTIZED) for _, m in model.named_modules())


def choose(requested: str, model: nn.Module, room_bytes: int) -> FormatChoice:
    kernels = cpu.kernel_status().available
    quantized = is_quantized(model)
    if requested == "quantized":
        reason = "the catalog asks for the stored weights"
        return FormatChoice("stored", reason, kernels and quantized)
    if requested in DTYPES:
        f32 = requested == "float32"
        return FormatChoice(requested, "the catalog asks for it", kernels and f32)
    if mx.default_device() != mx.cpu:
        return FormatChoice("stored", "a GPU backend computes the stored format fastest")
    needed = float32_bytes(model)
    if needed > room_bytes:
        return FormatChoice(
            "stored",
            f"float32 would take {needed / 2**20:,.0f} MiB, more than the "
            f"{room_bytes / 2**20:,.0f} MiB left in the pool's budget",
            kernels and quantized,
        )
    if blas.status().library is None:
        return FormatChoice(
            "stored", f"no optimized BLAS ({blas.status().reason})", kernels and quantized
        )
    if kernels and quantized:
        return FormatChoice(MEASURE, "timed at load unless the kernels take every layer", True)
    return FormatChoice("float32", "CPU backend with an optimized BLAS, and it fits", kernels)


def convert(model: nn.Module, target: str) -> nn.Module:
    """The model's weights in format `target` ("stored" leaves them), lazily: nothing is
    computed until evaluated, so a rank of a group converts only the shard it keeps."""
    if target != "stored":
        model = dequantize_model(model)
        model.set_dtype(DTYPES[target])
    return model


def apply(model: nn.Module, choice: FormatChoice) -> nn.Module:
    model = convert(model, choice.format)
    if choice.kernels:
        cpu.accelerate(model)
    mx.eval(model.parameters())
    return model


# What measure() chose, by the weights' key (format_verdicts.weights_key): a reload, and with
# a file a restart, reuses the verdict.
_verdicts = Verdicts()
TIMING_FAILED = "timing float32 failed (see the log)"
ALL_IN_KERNELS = "every quantized layer runs in the CPU kernels: the stored weights, untimed"


def keep_verdicts(path: str) -> None:
    """Where verdicts are kept across restarts (EngineConfig.compute_format_verdicts; "" keeps
    them in memory only). The engine sets it as it starts; a restarted engine with the same
    setting keeps what its predecessor measured."""
    global _verdicts
    wanted = Path(path).expanduser() if path else None
    if wanted != _verdicts.path:
        _verdicts = Verdicts(path)


def prepare(
    requested: str,
    model: nn.Module,
    room_bytes: int,
    key: str | None = None,
    timed: bool = True,
    activations: str = "15bit",
) -> tuple[nn.Module, FormatChoice]:
    """The model in the format to compute in, and why, its activations rounded as asked
    (refused, ActivationsRefused, where 8bit cannot apply)."""
    choice = choose(requested, model, room_bytes)
    if choice.format == MEASURE and activations == "8bit":
        reason = "8bit activations round on the kernels' integer path: the stored weights"
        choice = FormatChoice("stored", reason, True)
    model, choice = _prepared(model, choice, key, timed)
    return model, with_activations(model, choice, activations)


def with_activations(model: nn.Module, choice: FormatChoice, activations: str) -> FormatChoice:
    """The choice with the rounding the model's kernel layers now take (cpu.round_activations);
    8bit refused, saying why, where no layer would round so."""
    bits = 8 if activations == "8bit" else 15
    layers = cpu.round_activations(model, bits) if choice.kernels else 0
    if activations == "8bit":
        status, why = cpu.kernel_status(), ""
        if not status.available:
            why = f"the CPU kernels are off ({status.reason})"
        elif status.direct == "none":
            why = f"this CPU's kernels ({status.isa}) have no direct integer path"
        elif not layers:
            why = f"this model computes in {choice.format}, with no quantized layer in them"
        if why:
            raise ActivationsRefused(
                f"8bit activations apply to the CPU kernels' direct integer path: {why}"
            )
    return replace(choice, activations=activations if layers else "")


def _prepared(
    model: nn.Module, choice: FormatChoice, key: str | None, timed: bool
) -> tuple[nn.Module, FormatChoice]:
    """Where auto leaves it to a measurement: the stored weights untimed when the kernels
    take every quantized layer, else the verdict kept for `key`, else both formats timed
    (unless `timed` is off: the ranks of a group would time differently, and must agree)."""
    if choice.format == MEASURE and not timed:
        choice = FormatChoice("stored", "a distributed group keeps the stored format", True)
    if choice.format != MEASURE:
        return apply(model, choice), choice
    model = apply(model, FormatChoice("stored", "timing", True))
    if key is not None and (kept := _verdicts.get(key)):
        # as measure() left the model in that format
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(kept.measured_at))
        reason = f"as measured at a load on {when}: {kept.reason}"
        return _dense_if(model, kept.format), FormatChoice(kept.format, reason, True)
    left = cpu.on_mlx_path(model)
    if not left:
        # Each weight read at 4 or 8 bits by the kernels rather than 32 by OpenBLAS: decode
        # is several times faster stored at any width (measured so on every dense model of
        # the suite), so there is nothing to time.
        return model, FormatChoice("stored", ALL_IN_KERNELS, True)
    model, choice = measure(model, left)
    if key is not None and choice.reason != TIMING_FAILED:
        _verdicts.put(key, Verdict(choice.format, choice.reason, time.time()))
    mx.clear_cache()  # the losing format's buffers
    return model, choice


def measure(model: nn.Module, left: Counter[str]) -> tuple[nn.Module, FormatChoice]:
    """Times decode steps with the stored weights (the kernels' swapped in; `left`: the
    quantized layers still on MLX's path), then with as many decoder layers in float32 as
    PROBE_BYTES holds, and extrapolates the difference to all the weights: the format whose
    steps are faster is kept, without ever holding the whole float32 model beside the stored
    one (which would set the process's peak memory)."""
    try:
        stored, mixed, blocks = _timings(model)
    except Exception:  # timing is advice: a failure keeps the stored weights
        log.exception("timing the compute formats failed")
        return model, FormatChoice("stored", TIMING_FAILED, True)
    share = sum(map(_weights, blocks)) / _weights(model)
    # A noisy difference may extrapolate below zero; no format is ten times faster than that.
    f32 = [max(q + (m - q) / share, q / 10) for q, m in zip(stored, mixed, strict=True)]
    on_mlx = ", ".join(f"{count} {kind}" for kind, count in sorted(left.items()))
    batches = "/".join(map(str, PROBE_BATCHES))
    summary = (
        f"{on_mlx} on MLX's quantized path; decode steps at batch {batches} measured "
        f"{_ms(stored)} ms "
        f"quantized; with {len(blocks)} of {len(model.layers)} layers in float32 "
        f"{_ms(mixed)} ms, so about {_ms(f32)} ms in float32"
    )
    faster = (
        "stored"
        if statistics.geometric_mean(stored) <= statistics.geometric_mean(f32)
        else "float32"
    )
    return _dense_if(model, faster), FormatChoice(faster, summary, True)


def _dense_if(model: nn.Module, target: str) -> nn.Module:
    """The kernels' model (`apply` stored) as measure() times it in `target`: its quantized
    linear and embedding layers in float32 for "float32", as it is for "stored"."""
    if target == "float32":
        cpu.to_float32([model])
        mx.eval(model.parameters())
        mx.clear_cache()  # the quantized weights' buffers
    return model


def _timings(model: nn.Module) -> tuple[list[float], list[float], list[nn.Module]]:
    """Step seconds stored, and with the first layers in float32 (put back after)."""
    blocks = _probe_blocks(model)
    twins = cpu.Float32Twins(blocks)
    try:
        pairs = [_paired_steps(model, twins, batch) for batch in PROBE_BATCHES]
    finally:
        twins.use(dense=False)
    return [p[0] for p in pairs], [p[1] for p in pairs], blocks


def _probe_blocks(model: nn.Module) -> list[nn.Module]:
    blocks = []
    for block in model.layers:
        if blocks and (len(blocks) + 1) * float32_bytes(block) > PROBE_BYTES:
            break
        blocks.append(block)
    return blocks


def _weights(module: nn.Module) -> int:
    return float32_bytes(module) // 4


def _ms(seconds: list[float]) -> str:
    return "/".join(f"{s * 1000:.1f}" for s in seconds)


def _paired_steps(model: nn.Module, twins, batch: int) -> tuple[float, float]:
    """Decode steps alternating stored and mixed, each on its own cache, so that the machine's
    drift touches both alike; the lower quartile of each, since interference only slows."""
    tokens = mx.array([[1, 2, 3, 4]] * batch)
    caches, times = [], ([], [])
    for dense in (False, True):
        twins.use(dense)
        caches.append(make_prompt_cache(model))
        for layer in caches[-1]:
            layer.step = 32  # room for the probe's steps, not mlx-lm's 256 positions
        mx.eval(model(tokens, cache=caches[-1]))
    step = tokens[:, -1:]
    for i in range(2 * (PROBE_STEPS + 1)):
        dense = i % 2
        twins.use(bool(dense))
        started = time.perf_counter()
        mx.eval(model(step, cache=caches[dense]))
        if i >= 2:  # the first of each warms up
            times[dense].append(time.perf_counter() - started)
    return statistics.quantiles(times[0])[0], statistics.quantiles(times[1])[0]
