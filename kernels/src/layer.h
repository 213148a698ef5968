// A llama decoder layer in three primitives instead of about 28: the key and the value
// projections, each written straight into its KV cache buffer, and the rest of the layer
// (query, attention, output projection, MLP, both residuals). Each primitive composes the
// kernels the single-op primitives run (rms_norm_f32, run_product, rope_f32, attend,
// swiglu_f32) in the same order on the same values, so the layer's result is bit-for-bit the
// one of the per-op path; what goes is MLX's dispatch of each small op and Python building
// the graph.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "primitives.h"

namespace cpu_kernels {

// A quantized linear layer without bias, as quantized_matmul takes it (x_bytes: its x_bytes).
struct Linear {
  mx::array w, scales, biases;
  int group_size, bits;
  int x_bytes = 2;
};

// RoPE of nn.RoPE with a base (dims 0: none).
struct RopeSpec {
  int dims = 0;
  bool traditional = false;
  float base = 10000.0f, scale = 1.0f;
};

// Qwen3's RMSNorm of each head's projection before RoPE (q_norm, k_norm): weight [D] or none.
struct HeadNorm {
  std::optional<mx::array> weight;
  float eps = 1e-6f;
};

// rope(head_norm(rms_norm(x) @ proj.T)) per head, x [B, L, Din], written as rows [start, start + L) of
// `cache` [B, H, S, D] (float16 or float32, cast as astype casts); the other rows as they
// were. Returns the updated cache: `cache`'s own buffer when MLX may donate it (nothing else
// holds it), else a contiguous copy, as MLX's slice update does. `offset` (int32, one value or
// one per batch row) is the position of x's first row, for RoPE.
mx::array project_kv(
    const mx::array& x,
    const mx::array& norm_weight,
    float eps,
    const Linear& proj,
    const mx::array& cache,
    int start,
    const mx::array& offset,
    const RopeSpec& rope,
    const HeadNorm& head_norm = {},
    mx::StreamOrDevice s = {});

struct LayerSpec {
  float eps_attn, eps_mlp, scale;
  int q_heads;
  RopeSpec rope;
};

// h = x + o(attention(rope(q_norm(q(norm(x)))), keys[:, :, :n_keys], values[:, :, :n_keys], mask));
// out = h + down(silu(gate(norm'(h))) * up(norm'(h))), or h itself without gate, up and down
// (a block whose MLP is not a dense SwiGLU: a mixture of experts). Keys and values float16 or float32
// [B, Hkv, S >= n_keys, D], the last axis contiguous; mask None, "causal", or a boolean or
// additive array broadcastable to [B, Hq, L, n_keys].
mx::array decoder_layer(
    const mx::array& x,
    const mx::array& keys,
    const mx::array& values,
    int n_keys,
    const mx::array& offset,
    const std::variant<std::monostate, std::string, mx::array>& mask,
    const mx::array& norm_attn,
    const mx::array& norm_mlp,
    const Linear& q,
    const Linear& o,
    const std::optional<Linear>& gate,
    const std::optional<Linear>& up,
    const std::optional<Linear>& down,
    const LayerSpec& spec,
    const HeadNorm& q_norm = {},
    mx::StreamOrDevice s = {});

}  // namespace cpu_kernels
