"""What a loaded model's weights are, in words (engine/weights_format.py): the quantization
mlx-lm loaded it with, else its parameters' dtype, and the compute format it was converted to."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest

from inference.engine.weights_format import describe

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)


def model_in(dtype: mx.Dtype) -> nn.Module:
    model = TwoLayers()
    model.set_dtype(dtype)
    return model


def test_unquantized_weights_are_named_by_their_dtype():
    assert describe({}, model_in(mx.bfloat16), "stored") == "bfloat16"
    assert describe({}, model_in(mx.float16), "stored") == "float16"
    assert describe({}, model_in(mx.float32), "stored") == "float32"


def test_quantized_weights_say_bits_group_and_mode():
    model = model_in(mx.float16)
    assert describe({"quantization": {"group_size": 64, "bits": 4}}, model, "stored") == "4-bit g64"
    eight = {"quantization": {"group_size": 32, "bits": 8, "mode": "affine"}}
    assert describe(eight, model, "stored") == "8-bit g32"
    # A Hugging Face mxfp4 checkpoint, as mlx-lm leaves its config once loaded.
    mxfp4 = {"group_size": 32, "bits": 4, "mode": "mxfp4"}
    assert describe({"quantization": mxfp4, "quantization_config": mxfp4}, model, "stored") == (
        "mxfp4"
    )


def test_mixed_layers_are_summarised_fewest_bits_first():
    model = model_in(mx.float16)
    quantization = {
        "group_size": 32,
        "bits": 4,
        "up": {"group_size": 32, "bits": 6},
        "down": {"group_size": 64, "bits": 8},
        "lm_head": {"group_size": 32, "bits": 4},  # as the model's: not named
    }
    config = {"quantization": quantization}
    assert describe(config, model, "stored") == "4-bit g32 (6-bit, 8-bit g64 for some layers)"
    kept_float = {"group_size": 64, "bits": 4, "down": False}
    assert describe({"quantization": kept_float}, model, "stored") == (
        "4-bit g64 (unquantized for some layers)"
    )


def test_a_converted_model_holds_its_compute_format():
    """compute_format.convert dequantized the stored 4-bit weights to float32."""
    config = {"quantization": {"group_size": 64, "bits": 4}}
    assert describe(config, model_in(mx.float32), "float32") == "float32"
