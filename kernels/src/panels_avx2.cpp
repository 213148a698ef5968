// Many rows (prompt reading, wide batches) on AVX2 without VNNI: the weights dequantized to
// float32 panels of 16 columns and multiplied with the rows six at a time by FMA, as a BLAS
// sgemm does (a 6 x 16 register block: 12 accumulators, two panel loads and one broadcast).
//
// Why not the integer tiles (int8_impl.h) here: AVX2 has no vpdpbusd, and their activations
// are two bytes (int8_impl.h says why one is too coarse), so each weight byte costs two
// vpmaddubsw and a widening vpmaddwd. At real widths (2048x8192, 4-bit g32, 512 rows, 2 cores)
// they ran 172 ms a product against 114 ms for float32 BLAS on the dequantized matrix, and
// 8-bit weights 283 ms. Dequantizing a panel costs one pass over the column's packed bytes,
// spread over every row of the product. The results are the float path's arithmetic (the
// weights as MLX dequantizes them, float32 products): no rounding of the activations.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "int8_impl.h"  // param()
#include "panels.h"
#include "threads.h"

namespace cpu_kernels {
namespace {

constexpr int TN = 16;  // columns per panel
constexpr int RM = 6;  // rows per register block

// 8 consecutive values of a column from k on (k a multiple of 8), as floats.
template <int BITS>
inline __m256 values8(const uint8_t* column, int k) {
  if constexpr (BITS == 4) {
    uint32_t packed;
    std::memcpy(&packed, column + k / 2, 4);
    const __m128i b = _mm_cvtsi32_si128(int(packed));
    const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));  // k order
  } else {
    uint64_t packed;
    std::memcpy(&packed, column + k, 8);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(packed))));
  }
}

// 8 vectors (one per column, 8 k each) to 8 vectors (one per k, 8 columns each).
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// Columns [n0, n0 + 16) dequantized into panel[K][16] (columns past N are zeros), eight
// columns by eight k at a time: scale * q + bias, as MLX dequantizes.
template <int BITS>
void dequantize_panel(const Problem& p, int n0, float* panel) {
  const size_t row_bytes = size_t(p.K) * BITS / 8;
  const int G = p.K / p.group;
  for (int half = 0; half < TN; half += 8) {
    for (int k = 0; k < p.K; k += 8) {
      const int g = k / p.group;
      __m256 r[8];
      for (int c = 0; c < 8; c++) {
        const int n = n0 + half + c;
        if (n >= p.N) {
          r[c] = _mm256_setzero_ps();
          continue;
        }
        const size_t at = size_t(n) * G + g;
        const __m256 scale = _mm256_set1_ps(int8::param(p, p.scales, at));
        const __m256 bias = _mm256_set1_ps(int8::param(p, p.biases, at));
        r[c] = _mm256_fmadd_ps(values8<BITS>(p.w + size_t(n) * row_bytes, k), scale, bias);
      }
      transpose8(r);
      for (int i = 0; i < 8; i++) _mm256_storeu_ps(panel + size_t(k + i) * TN + half, r[i]);
    }
  }
}

// x's rows in blocks of RM, each block [K][RM] (rows side by side per k): the register
// block then reads its activations as one sequential stream, not RM rows a row's length
// apart (which meet in the same cache sets). Rows past M are zeros.
void pack_rows(const Problem& p, float* packed, int b0, int b1) {
  for (int b = b0; b < b1; b++) {
    float* block = packed + size_t(b) * p.K * RM;
    for (int r = 0; r < RM; r++) {
      const int m = b * RM + r;
      if (m >= p.M) {
        for (int k = 0; k < p.K; k++) block[size_t(k) * RM + r] = 0.0f;
        continue;
      }
      const float* x = p.x + size_t(m) * p.K;
      for (int k = 0; k < p.K; k++) block[size_t(k) * RM + r] = x[k];
    }
  }
}

// Rows [m0, m0 + R) times one panel: each output a single FMA chain over k in order, so a
// row's result does not depend on which rows share its block (any batch computes it alike).
template <int R>
void rows_panel(const Problem& p, const float* panel, const float* xs, int m0, int n0) {
  __m256 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const int K = p.K;  // locals: the loop keeps every accumulator in a register
  const float* x = xs + size_t(m0 / RM) * K * RM;
  const float* b = panel;
  for (int k = 0; k < K; k++, x += RM, b += TN) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const __m256 a = _mm256_broadcast_ss(x + r);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  alignas(32) float result[R][TN];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    _mm256_store_ps(result[r], acc[r][0]);
    _mm256_store_ps(result[r] + 8, acc[r][1]);
  }
  const int cols = std::min(TN, p.N - n0);
  for (int r = 0; r < R; r++) std::memcpy(p.out + size_t(m0 + r) * p.N + n0, result[r], sizeof(float) * cols);
}

template <int R = 1>
void rows_left(int left, const Problem& p, const float* panel, const float* xs, int m0, int n0) {
  if constexpr (R < RM) {
    if (left == R) return rows_panel<R>(p, panel, xs, m0, n0);
    rows_left<R + 1>(left, p, panel, xs, m0, n0);
  }
}

// Panels [t0, t1): each dequantized into this thread's buffer (it stays in L2: 128 KiB at
// 2,048 features), then every row block over it.
template <int BITS>
void panel_range(const Problem& p, const float* xs, int t0, int t1) {
  thread_local std::vector<float> panel;
  panel.resize(size_t(p.K) * TN);
  for (int t = t0; t < t1; t++) {
    dequantize_panel<BITS>(p, t * TN, panel.data());
    int m = 0;
    for (; m + RM <= p.M; m += RM) rows_panel<RM>(p, panel.data(), xs, m, t * TN);
    if (m < p.M) rows_left(p.M - m, p, panel.data(), xs, m, t * TN);
  }
}

void product(const Problem& p) {
  thread_local std::vector<float> packed;  // the caller's: the workers read it
  const size_t blocks = (size_t(p.M) + RM - 1) / RM;
  packed.resize(blocks * p.K * RM);
  float* xs = packed.data();
  split(blocks, size_t(p.K) * RM, 1, [&](size_t b0, size_t b1) { pack_rows(p, xs, int(b0), int(b1)); });
  const size_t panels = (size_t(p.N) + TN - 1) / TN;
  split(panels, size_t(p.M) * p.K * TN, 1, [&](size_t t0, size_t t1) {
    if (p.bits == 4) {
      panel_range<4>(p, xs, int(t0), int(t1));
    } else {
      panel_range<8>(p, xs, int(t0), int(t1));
    }
  });
}

}  // namespace

const Panels* avx2_panels() {
  // From 16 rows (bench/kernels.py, 2048x8192 g32, 2 cores): 4-bit 9.1 ms against 9.3 for
  // the float rows path (rows_impl.h, which dequantizes per block of rows) and 11.8 for the
  // integer tiles; 64 rows 20 / 37 / 27; 560 rows 130 / 290 / 206 (8-bit 134 / 283 / 306).
  static const Panels k{"avx2", 16, 16, product};
  return avx2_int8_kernels() != nullptr ? &k : nullptr;  // AVX2 with FMA and F16C
}

}  // namespace cpu_kernels
