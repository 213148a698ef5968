// The integer path on AVX2: vpmaddubsw (unsigned weight bytes times signed activation bytes,
// pairs summed to int16) then vpmaddwd by ones (int32 per column). 8-bit weights are stored as
// q - 128 and multiplied through their sign (|w| times sign(w) * x), since 255 * 127 * 2
// overflows the int16 pair sum; the offset returns through the bias (b + 128 s).
#include <immintrin.h>

#include "int8_impl.h"

namespace cpu_kernels {
namespace {

struct Avx2Int8 {
  using I = __m256i;
  using F = __m256;
  static constexpr int cols = 8;
  static constexpr int R = 2;  // rows per register block: 4 int32 sums, 4 int16 partials, 2 weight vectors, 1 broadcast
  static constexpr int V = 1;
  static constexpr bool offset8 = true;

  static I zero() { return _mm256_setzero_si256(); }
  static F fzero() { return _mm256_setzero_ps(); }
  static I load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I broadcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  // Partial sums are int16 pairs: a 4-bit step's are at most 2 * 15 * 127, so eight of them
  // add up in int16 before one vpmaddwd widens them (half the multiplies of widening each);
  // an 8-bit step's (up to 2 * 128 * 127) widen at once.
  template <int BITS>
  static constexpr int run() { return BITS == 4 ? 8 : 1; }
  template <int BITS>
  static I dot(I part, I w, I x) {
    if constexpr (BITS == 4) return _mm256_add_epi16(part, _mm256_maddubs_epi16(w, x));
    return _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));  // part is zero
  }
  template <int BITS>
  static I widen(I acc, I part) { return _mm256_add_epi32(acc, _mm256_madd_epi16(part, _mm256_set1_epi16(1))); }
  static I shift7(I v) { return _mm256_slli_epi32(v, 7); }
  static F to_float(I v) { return _mm256_cvtepi32_ps(v); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void transpose16(const uint8_t* rows, size_t stride, uint32_t* dst) {
    int8::transpose_dwords(rows, stride, 0, 16, dst);
  }
};

bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

}  // namespace

const Int8Kernels* avx2_int8_kernels() {
  static const Int8Kernels k{"avx2", int8::product<Avx2Int8>, 16, 16};
  static const bool ok = has_avx2();
  return ok ? &k : nullptr;
}

}  // namespace cpu_kernels
