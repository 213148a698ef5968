// The integer path on AVX-512 VNNI: vpdpbusd multiplies 64 unsigned weight bytes by 64 signed
// activation bytes and adds each four into 16 int32 lanes, one lane per output column.
#include <immintrin.h>

#include "int8_impl.h"

namespace cpu_kernels {
namespace {

struct Vnni {
  using I = __m512i;
  using F = __m512;
  static constexpr int cols = 16;
  // 4 rows x 2 tiles: 8 sums, 8 accumulators. Measured on Zen 4 against 6x2, 5x2, 4x3, 6x1,
  // 8x1: the fastest or within noise of it at 32 and 256 rows.
  static constexpr int R = 4;
  static constexpr int V = 2;
  static constexpr bool offset8 = false;  // weights 0..255 are what vpdpbusd takes

  static I zero() { return _mm512_setzero_si512(); }
  static F fzero() { return _mm512_setzero_ps(); }
  static I load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I broadcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  // vpdpbusd sums into int32 lanes: a group's steps all go into one partial sum.
  template <int BITS>
  static constexpr int run() { return 1 << 30; }
  template <int BITS>
  static I dot(I part, I w, I x) { return _mm512_dpbusd_epi32(part, w, x); }
  template <int BITS>
  static I widen(I acc, I part) { return _mm512_add_epi32(acc, part); }
  static I shift7(I v) { return _mm512_slli_epi32(v, 7); }
  static F to_float(I v) { return _mm512_cvtepi32_ps(v); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }

  // 16 dwords of 16 rows (`stride` bytes apart) to 16 of the 16 rows side by side: pairs of
  // dwords, then of quadwords, then of 128-bit lanes twice.
  static void transpose16(const uint8_t* rows, size_t stride, uint32_t* dst) {
    I r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(rows + i * stride);
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
      r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
      r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
      r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
      r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8) {
      for (int i = 0; i < 4; i++) {
        t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + 4 + i], 0x88);
        t[h + 4 + i] = _mm512_shuffle_i32x4(r[h + i], r[h + 4 + i], 0xdd);
      }
    }
    for (int i = 0; i < 8; i++) {
      _mm512_storeu_si512(dst + 16 * i, _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88));
      _mm512_storeu_si512(dst + 16 * (i + 8), _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd));
    }
  }
};

bool has_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

const Int8Kernels* vnni_int8_kernels() {
  // Whole decode steps of the demo model, integer path / float path (bench/int8_decode.py,
  // 2-core AVX-512 VNNI, shared machine): 4-bit 1.02-1.21 at 4 rows, 1.08 at 5, 0.82-1.00 at
  // 6, 0.81-0.93 at 8; 8-bit 1.10-1.15 at 4, 1.02 at 6, 0.98-1.02 at 8, 0.90 at 10.
  static const Int8Kernels k{"avx512vnni", int8::product<Vnni>, 6, 8};
  static const bool ok = has_vnni();
  return ok ? &k : nullptr;
}

}  // namespace cpu_kernels
