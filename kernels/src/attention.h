// Attention over a KV cache in float32, float16 or MLX's affine 8- and 4-bit layout, queries
// and output in float32, with an online softmax over tiles of keys (no score matrix).
//
// out = softmax(scale * q k^T + mask) v for q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv],
// Hq a multiple of Hkv; the mask as in ops.h's MaskKind. Out: contiguous [B, Hq, L, Dv].
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops.h"

namespace cpu_kernels {

enum class KVFormat : uint8_t { F32, F16, Q8, Q4 };
enum class ParamType : uint8_t { F32, F16, BF16 };  // of a quantized side's scales and biases

// Keys or values: rows of `dim` values per (batch row, head, position), the last axis
// contiguous. Quantized rows hold dim * bits / 8 bytes and dim / group scales and biases.
struct KVSide {
  KVFormat format;
  int dim;
  const uint8_t* data;
  int64_t strides[3];  // batch, head, position, in bytes
  const uint8_t* scales = nullptr;
  const uint8_t* biases = nullptr;
  int64_t scale_strides[3] = {0, 0, 0};  // in bytes
  int64_t bias_strides[3] = {0, 0, 0};
  ParamType param_type = ParamType::F32;
  int group = 0;
};

struct Attend {
  int batch, q_heads, kv_heads, length, keys;
  float scale;
  const float* q;
  int64_t q_strides[3];  // batch, head, position, in floats; the last axis contiguous
  KVSide k, v;
  MaskKind mask_kind;
  const void* mask;
  int64_t mask_strides[4];  // over [B, Hq, L, S], in elements
};

void attend(const Attend& a, float* out);

namespace attn {

// One unit of work: batch row b, key/value head g, query positions [l0, l0 + count), keys
// [j0, j1) (a multiple of KEY_BLOCK apart). With `partial` set (keys split between units),
// each row's running maximum, sum and unscaled output go to partial + (split * B * Hq * L +
// row) * (2 + Dv) instead of its result to out; attend() combines them.
struct Unit {
  int b, g, l0, count;
  int j0, j1;
  int split = 0;
  float* partial = nullptr;
};

// One instruction set's kernels (attention_tiles.h), each over one unit; `scratch` holds
// scratch_floats() floats.
struct Table {
  const char* isa;
  int lanes;
  int row_block;  // query rows (heads x positions) the tiled kernel takes at once
  void (*tiled)(const Attend&, const Unit&, float* scratch, float* out);
  void (*dot)(const Attend&, const Unit&, float* scratch, float* out);
};

const Table& avx512_table();
const Table& avx2_table();
const Table& generic_table();

constexpr int KEY_BLOCK = 64;  // keys per tile

}  // namespace attn
}  // namespace cpu_kernels
