// Activations rounded as int8_impl.h's quantize_rows rounds them, 16 at a time on AVX-512: the
// direct integer paths' staging (int8_direct.cpp, x8_vnni.cpp). Internal linkage: each file
// compiles them with its own flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace cpu_kernels {
namespace {

// 32 activations as int8_impl.h's quantize_rows rounds them (the same float operations in the
// same order, so the same bytes): t = x * inv, hi = round(t), lo = round((t - hi) * 128).
// Stores 16 hi and 16 lo bytes per half and returns the halves' sum of 128 hi + lo.
inline __m512i round_half(__m512 x, __m512 inv, int8_t* hi, int8_t* lo) {
  const __m512 t = _mm512_mul_ps(x, inv);
  const __m512 h = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i l = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(t, h), _mm512_set1_ps(128.0f)));
  const __m512i hv = _mm512_cvtps_epi32(h);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), _mm512_cvtepi32_epi8(hv));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm512_cvtepi32_epi8(l));
  return _mm512_add_epi32(_mm512_slli_epi32(hv, 7), l);
}

// As round_half, the high bytes only (x_bytes 1: t = x * 127 / amax rounded, llama.cpp's Q8).
inline __m512i round_half_one(__m512 x, __m512 inv, int8_t* hi) {
  const __m512i hv = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), _mm512_cvtepi32_epi8(hv));
  return hv;
}

}  // namespace
}  // namespace cpu_kernels
