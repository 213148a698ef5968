// AVX-512 (F + BW + VL): 16 float lanes, up to 12 activation rows per pass.
#include <immintrin.h>

#include "attention_impl.h"
#include "rows_impl.h"
#include "sums_avx512.h"

namespace cpu_kernels {
namespace {

struct Avx512 {
  using F = __m512;
  using I = __m512i;
  static constexpr int lanes = 16;
  static constexpr int max_rows = 12;
  static constexpr int accumulators = 24;

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static float reduce(F a) { return _mm512_reduce_add_ps(a); }
  // Horizontal sums of C vectors into out[0..C).
  template <int C>
  static void reduce_store(const F* v, float* out) {
    if constexpr (C == 4) {
      sum4_avx512(v, out);
    } else {
      for (int c = 0; c < C; c++) out[c] = reduce(v[c]);
    }
  }
  static I widen_bytes(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I low_nibbles(I v) { return _mm512_and_si512(v, _mm512_set1_epi32(15)); }
  static I high_nibbles(I v) { return _mm512_srli_epi32(v, 4); }
  static F to_float(I v) { return _mm512_cvtepi32_ps(v); }

  // The group's 16 possible weights are one register (scale * [0..15] + bias); vpermps
  // picks them by nibble, ignoring the index bits above the fourth, so the low nibbles need
  // no mask and no int-to-float conversion.
  static void dequantize_nibbles(const uint8_t* p, F scale, F bias, F& lo, F& hi) {
    const F iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    F table = _mm512_fmadd_ps(iota, scale, bias);
    I packed = widen_bytes(p);
    lo = _mm512_permutexvar_ps(packed, table);
    hi = _mm512_permutexvar_ps(high_nibbles(packed), table);
  }
  static void halves_to_floats(const uint16_t* in, float* out, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
      _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
    }
    if (i < n) {  // the tail through masked loads, not one value at a time
      __mmask16 m = __mmask16((1u << (n - i)) - 1);
      __m256i h = _mm256_maskz_loadu_epi16(m, in + i);
      _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(h));
    }
  }
  static void bf16s_to_floats(const uint16_t* in, float* out, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
      __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
      _mm512_storeu_ps(out + i, _mm512_castsi512_ps(w));
    }
    for (; i < n; i++) out[i] = detail::bf16_to_float(in[i]);
  }
};

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k{"avx512", Avx512::lanes, detail::rows_any<Avx512>, detail::attention_any<Avx512>};
  return k;
}

}  // namespace cpu_kernels
