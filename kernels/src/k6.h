// GGUF's Q6_K weights as the kernels read them ("bits 6"; included by the instruction sets'
// files only): imported bit for bit, so a token reads 6.56 bits a weight, as llama.cpp does,
// instead of the 9 of MLX's 8-bit (group 32, float16 scale and bias) Q6_K used to become.
//
// A column (one output feature) of K inputs, K a multiple of 256:
//   w    uint32 [N, K * 6 / 32]: per 128 values, 96 bytes: 64 bytes of low nibbles (byte i:
//        value i in its low half, value 64 + i in its high half), then 32 bytes of the top
//        two bits (byte i: values i, 32 + i, 64 + i, 96 + i at bits 0, 2, 4, 6), so that
//        each 64 codes come out of the registers with a shift, two masks and an or
//   scales int8 [N, K / 16]: Q6_K's per-16 scales
//   biases float16 [N, K / 256]: Q6_K's super-block scale d (there is no bias: Q6_K's codes
//        are centred on 32)
//   weight k = d[k / 256] * scales[k / 16] * (q[k] - 32), q[k] in 0..63
//
// Products take the direct integer path (k6_vnni.cpp) up to its row bound and the integer
// tiles (int8_impl.h: the codes unpacked to bytes, 16-value groups) past it. The direct path
// rounds activations per 16 values (one Q6_K scale) to one or two bytes as int8_direct.cpp
// rounds a group, unpacks the codes in registers, and takes one vpdpbusd per activation byte
// and one float step per 64 values; the -32 returns through each block's activation sum. Only
// on AVX-512 VNNI (qmm.cpp says why): elsewhere the engine converts them to MLX's 8-bit at load.
#pragma once

#include <cmath>
#include <cstring>

#include "int8.h"

namespace cpu_kernels {

constexpr int K6_BITS = 6, K6_GROUP = 16, K6_SUPER = 256;

// Where one row's staged activations lie: per 64-value chunk the high bytes, then the low
// ones (two-byte activations); then a float per lane of four values (the scale of its 16's
// activations, vpdpbusd's lanes); then per 16 values that scale times their integer sum.
struct K6Layout {
  int chunks, x_bytes;
  bool one_byte;
  size_t lanes_at, sums_at, stride;

  explicit K6Layout(const Problem& p)
      : chunks(p.K / 64), x_bytes(64 * p.x_bytes), one_byte(p.x_bytes == 1) {
    lanes_at = size_t(chunks) * x_bytes;
    sums_at = lanes_at + size_t(chunks) * 16 * sizeof(float);
    stride = sums_at + size_t(p.K / K6_GROUP) * sizeof(float);
  }
};

// One row's 16-value blocks rounded as int8_direct.cpp rounds a group: t = x * 127 / amax,
// hi = round(t), lo = round((t - hi) * 128) (two bytes), or hi alone (one byte).
inline void k6_stage_row(const float* x, int K, const K6Layout& L, uint8_t* row) {
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* lanes = reinterpret_cast<float*>(row + L.lanes_at);
  float* sums = reinterpret_cast<float*>(row + L.sums_at);
  for (int s = 0; s < K / K6_GROUP; s++) {
    const float* xs = x + size_t(s) * K6_GROUP;
    float amax = 0.0f;
    for (int i = 0; i < K6_GROUP; i++) amax = std::fmax(amax, std::fabs(xs[i]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const float d = L.one_byte ? amax / 127.0f : amax / 127.0f / 128.0f;
    int8_t* hi = q + size_t(s / 4) * L.x_bytes + (s % 4) * K6_GROUP;
    int sum = 0;
    for (int i = 0; i < K6_GROUP; i++) {
      const float t = xs[i] * inv;
      const float h = std::nearbyint(t);
      hi[i] = int8_t(h);
      if (L.one_byte) {
        sum += int(h);
      } else {
        const float l = std::nearbyint((t - h) * 128.0f);
        hi[64 + i] = int8_t(l);
        sum += 128 * int(h) + int(l);
      }
    }
    sums[s] = d * float(sum);
    for (int l = 0; l < 4; l++) lanes[size_t(s / 4) * 16 + (s % 4) * 4 + l] = d;
  }
}

inline size_t k6_row_bytes(const Problem& p) {
  return K6Layout(p).stride;
}

inline void k6_stage(const Problem& p, uint8_t* out) {
  const K6Layout L(p);
  for (int m = 0; m < p.M; m++) k6_stage_row(p.x + size_t(m) * p.K, p.K, L, out + L.stride * m);
}

}  // namespace cpu_kernels
