#include "ops.h"

#if defined(__x86_64__)
#include "exp_avx512.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "qmm.h"
#include "threads.h"
#include "vecmath.h"

namespace cpu_kernels {

namespace {

CPU_KERNELS_CLONES
void rms_norm_row(const float* x, const float* w, float* out, int dim, float eps) {
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int i = 0; i < dim; i++) squares += x[i] * x[i];
  float inv = 1.0f / std::sqrt(squares / float(dim) + eps);
#pragma omp simd
  for (int i = 0; i < dim; i++) out[i] = x[i] * inv * w[i];
}

CPU_KERNELS_CLONES
void swiglu_span(const float* gate, const float* up, float* out, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    float g = gate[i];
    // sigmoid through exp of a non-positive argument, for either sign of g
    float e = exp_nonpositive(-std::fabs(g));
    float sig = g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    out[i] = g * sig * up[i];
  }
}

#if defined(__x86_64__)
// The loop above on AVX-512, written out: GCC left it scalar (its clamp and sign select became
// branches), 1 ms a token at the 1.7B shape's 28 x 6144 gate values.
__attribute__((target("avx512f"))) void swiglu_span_avx512(const float* gate, const float* up, float* out, size_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp_nonpositive_avx512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
    const __mmask16 positive = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 sig = _mm512_div_ps(_mm512_mask_blend_ps(positive, e, one), _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_loadu_ps(up + i)));
  }
  if (i < n) swiglu_span(gate + i, up + i, out + i, n - i);
}
#endif

}  // namespace

void rms_norm_f32(const float* x, const float* w, float* out, size_t rows, int dim, float eps) {
  split(rows, size_t(dim), 1, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; r++) rms_norm_row(x + r * dim, w, out + r * dim, dim, eps);
  });
}

void swiglu_f32(const float* gate, const float* up, float* out, size_t n) {
  constexpr size_t BLOCK = 4096;
#if defined(__x86_64__)
  const bool avx512 = std::strcmp(active_kernels().isa, "avx512") == 0;  // as use_isa() says
#endif
  split((n + BLOCK - 1) / BLOCK, BLOCK, 1, [&](size_t b0, size_t b1) {
    size_t i0 = b0 * BLOCK, i1 = std::min(n, b1 * BLOCK);
#if defined(__x86_64__)
    if (avx512) return swiglu_span_avx512(gate + i0, up + i0, out + i0, i1 - i0);
#endif
    swiglu_span(gate + i0, up + i0, out + i0, i1 - i0);
  });
}

void rope_f32(const Rope& r, const float* x, float* out) {
  const int half = r.dims / 2;
  // Angles as MLX's reference computes them, in float32: position * scale * inv_freq.
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; i++) {
    inv_freq[i] = r.freqs ? 1.0f / r.freqs[i]
                          : std::exp(-float(i) * (std::log(r.base) / float(half)));
  }
  // cos and sin per (batch row, position), shared by every head.
  const int batches = r.offset_count == 1 ? 1 : r.batch;
  std::vector<float> cs(size_t(batches) * r.length * half * 2);
  for (int b = 0; b < batches; b++) {
    for (int l = 0; l < r.length; l++) {
      float position = float(r.offsets[b] + l) * r.scale;
      float* row = cs.data() + (size_t(b) * r.length + l) * half * 2;
      for (int i = 0; i < half; i++) {
        float theta = position * inv_freq[i];
        row[2 * i] = std::cos(theta);
        row[2 * i + 1] = std::sin(theta);
      }
    }
  }
  const size_t rows = size_t(r.batch) * r.heads * r.length;
  split(rows, size_t(r.dim), 1, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
      int l = int(i % r.length), h = int(i / r.length % r.heads), b = int(i / r.length / r.heads);
      const float* src = x + b * r.strides[0] + h * r.strides[1] + l * r.strides[2];
      const int64_t step = r.strides[3];
      float* dst = out + i * r.dim;
      const float* row = cs.data() + (size_t(batches == 1 ? 0 : b) * r.length + l) * half * 2;
      for (int j = 0; j < half; j++) {
        int a = r.traditional ? 2 * j : j;
        int c = r.traditional ? 2 * j + 1 : j + half;
        float x1 = src[a * step], x2 = src[c * step];
        float cosv = row[2 * j], sinv = row[2 * j + 1];
        dst[a] = x1 * cosv - x2 * sinv;
        dst[c] = x1 * sinv + x2 * cosv;
      }
      for (int j = r.dims; j < r.dim; j++) dst[j] = src[j * step];
    }
  });
}

}  // namespace cpu_kernels
