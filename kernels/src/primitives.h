// MLX primitives that run this module's kernels on MLX's CPU stream, and the functions that
// make them (what the Python module exposes). Every output is a new float32 array.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "mlx/array.h"
#include "mlx/primitives.h"
#include "mlx/stream.h"
#include "mlx/utils.h"

namespace cpu_kernels {

namespace mx = mlx::core;

// x @ dequantize(w, scales, biases).T, as mx.quantized_matmul(transpose=True) in float32.
// x_bytes: what the direct integer path (few rows) rounds each activation to (Problem::x_bytes);
// refused unless 1 or 2.
mx::array quantized_matmul(
    const mx::array& x,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    int x_bytes = 2,
    mx::StreamOrDevice s = {});

// x [rows, K] times each row's expert of stacked quantized weights w [E, N, K * bits / 32]
// (scales, biases [E, N, K / group_size]): out[r] = x[r] @ dequantize(w[experts[r]]).T, as
// mx.gather_qmm(transpose=True) over rows, float32 [rows, N].
mx::array gather_quantized_matmul(
    const mx::array& x,
    const mx::array& experts,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    int x_bytes = 2,
    mx::StreamOrDevice s = {});

// a [..., N, B] (any dtype, N a multiple of 8) with each block of eight rows interleaved in
// units of `unit` bytes: a block holds unit 0 of its eight rows side by side, then unit 1...
// (the x8 layout's weights with unit 16, its scales and biases with their item size).
mx::array interleave8(const mx::array& a, int unit, mx::StreamOrDevice s = {});
// Q6_K's weights (k6.h, [N, K * 6 / 32] uint32 or its bytes) in the x8 layout (k6_vnni.cpp):
// uint8 [N, K * 6 / 8].
mx::array k6_interleave8(const mx::array& w, mx::StreamOrDevice s = {});
// Rows `ids` of Q6_K weights in the x8 layout (an embedding's lookup) as float32 [..., K].
mx::array k6_x8_rows(const mx::array& w, const mx::array& scales, const mx::array& supers, const mx::array& ids,
                     mx::StreamOrDevice s = {});

// As mx.fast.rms_norm(x, weight, eps).
mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps, mx::StreamOrDevice s = {});

// The gated delta rule (recurrence.h) over q, k [B, T, Hk, Dk], v [B, T, Hv, Dv], g and beta
// [B, T, Hv], state [B, Hv, Dv, Dk], mask [B, T] or None: one flat float32 array holding the
// new state (B * Hv * Dv * Dk values) then y (B * T * Hv * Dv), for the caller to reshape.
mx::array gated_delta(
    const mx::array& q,
    const mx::array& k,
    const mx::array& v,
    const mx::array& g,
    const mx::array& beta,
    const mx::array& state,
    const std::optional<mx::array>& mask,
    mx::StreamOrDevice s = {});

// As mx.conv1d(x, w, padding=padding, groups=C) for x [B, L, C] and w [C, K, 1] (one filter
// per channel, stride and dilation 1), in float32.
mx::array depthwise_conv1d(const mx::array& x, const mx::array& w, int padding, mx::StreamOrDevice s = {});

// silu(gate) * up.
mx::array swiglu(const mx::array& gate, const mx::array& up, mx::StreamOrDevice s = {});

// As mx.fast.rope(x, dims, traditional=, base=, scale=, offset=, freqs=), forward only;
// offset an int32 array of one value or one per batch row.
mx::array rope(
    const mx::array& x,
    int dims,
    bool traditional,
    std::optional<float> base,
    float scale,
    const mx::array& offset,
    const std::optional<mx::array>& freqs,
    mx::StreamOrDevice s = {});

// As mx.fast.scaled_dot_product_attention(q, k, v, scale=, mask=) without sinks; mask None,
// "causal", or a boolean or float array broadcastable to [B, Hq, L, S]. K and V float32 or
// float16 (read as they are), anything else made float32.
mx::array attention(
    const mx::array& q,
    const mx::array& k,
    const mx::array& v,
    float scale,
    const std::variant<std::monostate, std::string, mx::array>& mask,
    mx::StreamOrDevice s = {});

// attention() over K and V in MLX's affine layout (mx.quantize along the last axis, as
// mlx-lm's QuantizedKVCache keeps them): packed uint32 [B, Hkv, S, dim * bits / 32], scales
// and biases [B, Hkv, S, dim / group_size]; bits 4 or 8.
mx::array quantized_attention(
    const mx::array& q,
    const mx::array& k,
    const mx::array& k_scales,
    const mx::array& k_biases,
    const mx::array& v,
    const mx::array& v_scales,
    const mx::array& v_biases,
    float scale,
    const std::variant<std::monostate, std::string, mx::array>& mask,
    int group_size,
    int bits,
    mx::StreamOrDevice s = {});

// The token each row of logits [rows, vocabulary] draws, int32 [rows]: params [rows, 5] hold
// each row's inverse temperature (0: greedy), top_p, min_p, top_k and uniform (sampling.h).
mx::array sample_rows(const mx::array& logits, const mx::array& params, mx::StreamOrDevice s = {});

// The indices of each row's k largest logits, int32 [rows, k], largest first, ties by index.
mx::array top_k_indices(const mx::array& logits, int k, mx::StreamOrDevice s = {});

}  // namespace cpu_kernels
