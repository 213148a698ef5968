// The attention kernels (attention_tiles.h) for AVX2 + FMA + F16C: 8 float lanes, 16 registers:
// tiles of 4 keys (or value dims) by up to 3 vectors of query rows.
#include <immintrin.h>

#include "attention_tiles.h"

namespace cpu_kernels::attn {
namespace {

struct Avx2 {
  using F = __m256;
  static constexpr int lanes = 8;
  static constexpr int row_vectors = 3;
  static constexpr int key_block = 4;
  static constexpr int dim_block = 4;
  static constexpr int dot_rows = 2;

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static float reduce(F a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(F a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  template <int C>
  static void reduce_store(const F* v, float* out) {
    static_assert(C == 4);
    F a = _mm256_hadd_ps(v[0], v[1]);
    F b = _mm256_hadd_ps(v[2], v[3]);
    F c = _mm256_hadd_ps(a, b);
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1)));
  }
  // exp(x) for x <= 0 (-inf included): exp_nonpositive's polynomial, 2^n through the exponent.
  static F exp(F x) {
    x = _mm256_max_ps(x, set1(-87.0f));
    F n = _mm256_round_ps(_mm256_mul_ps(x, set1(1.44269504f)),
                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm256_fnmadd_ps(n, set1(0.693145752f), x);
    r = _mm256_fnmadd_ps(n, set1(1.42860677e-06f), r);
    F p = set1(1.3888889e-3f);
    p = fma(p, r, set1(8.3333333e-3f));
    p = fma(p, r, set1(4.1666667e-2f));
    p = fma(p, r, set1(1.6666667e-1f));
    p = fma(p, r, set1(0.5f));
    p = fma(p, r, set1(1.0f));
    p = fma(p, r, set1(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  }
  static F hide_after(F s, F key, F limit) {
    return _mm256_blendv_ps(s, set1(-INFINITY), _mm256_cmp_ps(key, limit, _CMP_GT_OQ));
  }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  static F q8(const uint8_t* p, float scale, float bias) {
    __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return fma(_mm256_cvtepi32_ps(q), set1(scale), set1(bias));
  }
  static F q4(const uint8_t* p, float scale, float bias) {
    int32_t four;
    std::memcpy(&four, p, 4);
    __m128i bytes = _mm_cvtsi32_si128(four);
    __m256i q = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
    q = _mm256_and_si256(_mm256_srlv_epi32(q, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)),
                         _mm256_set1_epi32(15));
    return fma(_mm256_cvtepi32_ps(q), set1(scale), set1(bias));
  }
  static F load_half(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void halves(const uint16_t* in, float* out, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) out[i] = _cvtsh_ss(in[i]);
  }
  static void dequant8(const uint8_t* p, float scale, float bias, float* out, int n) {
    F s = set1(scale), b = set1(bias);
    for (int i = 0; i < n; i += 8) {
      __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i)));
      _mm256_storeu_ps(out + i, fma(_mm256_cvtepi32_ps(q), s, b));
    }
  }
  static void dequant4(const uint8_t* p, float scale, float bias, float* out, int n) {
    F s = set1(scale), b = set1(bias);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
    const __m256i low = _mm256_set1_epi32(15);
    for (int i = 0; i < n; i += 8) {
      int32_t four;
      std::memcpy(&four, p + i / 2, 4);
      __m128i bytes = _mm_cvtsi32_si128(four);
      __m256i q = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
      q = _mm256_and_si256(_mm256_srlv_epi32(q, shifts), low);
      _mm256_storeu_ps(out + i, fma(_mm256_cvtepi32_ps(q), s, b));
    }
  }
};

}  // namespace

const Table& avx2_table() {
  static const Table t = table<Avx2>("avx2");
  return t;
}

}  // namespace cpu_kernels::attn
