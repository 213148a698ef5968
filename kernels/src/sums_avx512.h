// Horizontal sums of float32 AVX-512 vectors, shared by the AVX-512 kernels (rows, attention,
// the direct integer path). Internal linkage: each file compiles them with its own flags.
#pragma once

#include <immintrin.h>

namespace cpu_kernels {
namespace {

// Four vectors' sums into out[0..4): quarter-register sums of the four side by side (quarters
// 0+2 and 1+3, then those two), then within each quarter (elements 0+2 and 1+3, then those).
inline void sum4_avx512(const __m512* v, float* out) {
  const __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x44), _mm512_shuffle_f32x4(v[0], v[1], 0xEE));
  const __m512 y = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x44), _mm512_shuffle_f32x4(v[2], v[3], 0xEE));
  __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
  z = _mm512_add_ps(z, _mm512_permute_ps(z, 0x4E));
  z = _mm512_add_ps(z, _mm512_permute_ps(z, 0xB1));
  const __m512i firsts = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(firsts, z)));
}

// One vector's sum in sum4_avx512's order, bit for bit what it gives that vector.
inline float sum_avx512(__m512 v) {
  __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));
  return _mm512_cvtss_f32(t);
}

}  // namespace
}  // namespace cpu_kernels
