// AVX2 with FMA and F16C: 8 float lanes, up to 5 activation rows per pass (16 registers).
#include <immintrin.h>

#include "attention_impl.h"
#include "rows_impl.h"

namespace cpu_kernels {
namespace {

struct Avx2 {
  using F = __m256;
  using I = __m256i;
  static constexpr int lanes = 8;
  static constexpr int max_rows = 5;
  static constexpr int accumulators = 10;

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static float reduce(F a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  template <int C>
  static void reduce_store(const F* v, float* out) {
    if constexpr (C == 4) {
      F a = _mm256_hadd_ps(v[0], v[1]);  // pairs of each, interleaved
      F b = _mm256_hadd_ps(v[2], v[3]);
      F c = _mm256_hadd_ps(a, b);  // [s0 s1 s2 s3 | s0' s1' s2' s3'] per 128-bit half
      __m128 sum = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
      _mm_storeu_ps(out, sum);
    } else {
      // The order of four at a time (fewer columns padded with zeros): a pass's width depends
      // on its rows, and a row must sum alike in any batch (speculative verification).
      F four[4] = {zero(), zero(), zero(), zero()};
      float sums[4];
      for (int i = 0; i < C; i++) four[i] = v[i];
      reduce_store<4>(four, sums);
      for (int i = 0; i < C; i++) out[i] = sums[i];
    }
  }
  static I widen_bytes(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static I low_nibbles(I v) { return _mm256_and_si256(v, _mm256_set1_epi32(15)); }
  static I high_nibbles(I v) { return _mm256_srli_epi32(v, 4); }
  static F to_float(I v) { return _mm256_cvtepi32_ps(v); }

  // Low and high nibbles of `lanes` bytes as scale * q + bias.
  static void dequantize_nibbles(const uint8_t* p, F scale, F bias, F& lo, F& hi) {
    I packed = widen_bytes(p);
    lo = fma(to_float(low_nibbles(packed)), scale, bias);
    hi = fma(to_float(high_nibbles(packed)), scale, bias);
  }
  static void halves_to_floats(const uint16_t* in, float* out, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) out[i] = detail::half_to_float(in[i]);
  }
  static void bf16s_to_floats(const uint16_t* in, float* out, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(w));
    }
    for (; i < n; i++) out[i] = detail::bf16_to_float(in[i]);
  }
};

}  // namespace

const Kernels& avx2_kernels() {
  static const Kernels k{"avx2", Avx2::lanes, detail::rows_any<Avx2>, detail::attention_any<Avx2>};
  return k;
}

}  // namespace cpu_kernels
