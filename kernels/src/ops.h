// The other per-token operations of a transformer layer, fused: MLX's CPU backend runs each of
// these as a chain of several primitives (RoPE about 25), and each primitive costs a few
// microseconds of dispatch before any arithmetic. All in float32.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cpu_kernels {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for `rows` rows of `dim` contiguous floats.
void rms_norm_f32(const float* x, const float* w, float* out, size_t rows, int dim, float eps);

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up.
void swiglu_f32(const float* gate, const float* up, float* out, size_t n);

// Rotary embedding of x viewed as [batch, heads, length, dim] with element strides `strides`
// (any layout), written contiguous. Position of (b, l) = offsets[b or 0] + l; the first
// `dims` features rotate, in pairs (2i, 2i + 1) when traditional, else (i, i + dims / 2).
struct Rope {
  int batch, heads, length, dim, dims;
  int64_t strides[4];
  const int32_t* offsets;
  int offset_count;  // 1: one offset for the whole batch
  bool traditional;
  float base, scale;
  const float* freqs;  // dims / 2 frequencies instead of base's, or nullptr
};
void rope_f32(const Rope& r, const float* x, float* out);

// The first attention kernel's arguments (attention_impl.h, still referenced by qmm.h's
// Kernels; attention.h's attend() replaced it: float16 and quantized K/V, tiles of keys).
// softmax(scale * q k^T + mask) v for q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv]
// (element strides given; the last axis contiguous), Hq a multiple of Hkv. Mask: none,
// causal (query i sees keys up to i + S - L), or an array read through `mask_strides` over
// [B, Hq, L, S], boolean (false hides) or additive float. Out: contiguous [B, Hq, L, Dv].
enum class MaskKind : uint8_t { None, Causal, Bool, Additive };
struct Attention {
  int batch, q_heads, kv_heads, length, keys, dim, value_dim;
  float scale;
  const float* q;
  const float* k;
  const float* v;
  int64_t q_strides[3], k_strides[3], v_strides[3];  // batch, head, position
  MaskKind mask_kind;
  const void* mask;
  int64_t mask_strides[4];
};

}  // namespace cpu_kernels
