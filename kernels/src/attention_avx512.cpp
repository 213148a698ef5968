// The attention kernels (attention_tiles.h) for AVX-512 F + VL: 16 float lanes, 32 registers:
// tiles of 8 keys (or value dims) by up to 3 vectors of query rows.
#include <immintrin.h>

#include "attention_tiles.h"
#include "exp_avx512.h"
#include "sums_avx512.h"

namespace cpu_kernels::attn {
namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int lanes = 16;
  static constexpr int row_vectors = 3;
  static constexpr int key_block = 8;
  static constexpr int dim_block = 8;
  static constexpr int dot_rows = 4;

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static float reduce(F a) { return _mm512_reduce_add_ps(a); }
  static float reduce_max(F a) { return _mm512_reduce_max_ps(a); }
  template <int C>
  static void reduce_store(const F* v, float* out) {
    static_assert(C == 4);
    sum4_avx512(v, out);
  }
  static F exp(F x) { return exp_nonpositive_avx512(x); }
  static F hide_after(F s, F key, F limit) {
    return _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(key, limit, _CMP_GT_OQ), set1(-INFINITY));
  }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  static F q8(const uint8_t* p, float scale, float bias) {
    __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return fma(_mm512_cvtepi32_ps(q), set1(scale), set1(bias));
  }
  static F q4(const uint8_t* p, float scale, float bias) {
    const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    __m512i q = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
    q = _mm512_and_si512(_mm512_srlv_epi32(q, shifts), _mm512_set1_epi32(15));
    return fma(_mm512_cvtepi32_ps(q), set1(scale), set1(bias));
  }
  static F load_half(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void halves(const uint16_t* in, float* out, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
      _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
    }
    if (i < n) {
      __mmask16 m = __mmask16((1u << (n - i)) - 1);
      _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, in + i)));
    }
  }
  // n (a group: a multiple of 16) bytes as scale * q + bias.
  static void dequant8(const uint8_t* p, float scale, float bias, float* out, int n) {
    F s = set1(scale), b = set1(bias);
    for (int i = 0; i < n; i += 16) {
      __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
      _mm512_storeu_ps(out + i, fma(_mm512_cvtepi32_ps(q), s, b));
    }
  }
  // n nibbles (low first in each byte): each byte twice, shifted by 0 and 4, picks its value
  // from the group's 16 (vpermps reads the low 4 bits of each index).
  static void dequant4(const uint8_t* p, float scale, float bias, float* out, int n) {
    const F table = fma(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                        set1(scale), set1(bias));
    const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    for (int i = 0; i < n; i += 16) {
      __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i / 2));
      __m512i q = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
      _mm512_storeu_ps(out + i, _mm512_permutexvar_ps(_mm512_srlv_epi32(q, shifts), table));
    }
  }
};

}  // namespace

const Table& avx512_table() {
  static const Table t = table<Avx512>("avx512");
  return t;
}

}  // namespace cpu_kernels::attn
