// The integer path (int8.h), written once over an instruction set T and compiled per set
// (int8_vnni.cpp, int8_avx2.cpp define T and include this file).
//
// T provides: I (integer vector), F (float vector), cols (int32 lanes per vector), R and V
// (rows and 16-column tiles of one register block), offset8 (8-bit weights stored as q - 128,
// for dot products that take signed weights), and the operations used below.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "int8.h"
#include "rows_impl.h"
#include "threads.h"

namespace cpu_kernels::int8 {

constexpr int TN = 16;  // columns per weight tile

// Both operands in the kernel's layout.
struct Packed {
  const int8_t* xq;  // [M][K] activations rounded to int8 per block of `group` (hi)
  const int8_t* xlo;  // [M][K] what rounding left, times 128, rounded again (lo)
  const float* xd;  // [M][G] each block's scale d: x = d * (128 hi + lo)
  const float* xs;  // [M][G] d * the block's sum of (128 hi + lo)
  uint8_t* wq;  // [tiles][K / 4][16][4]: four consecutive k of 16 columns per 64 bytes
  float* wd;  // [tiles][G][16] weight scales
  float* wb;  // [tiles][G][16] weight biases (+ 128 * scale where offset8)
  int M, N, K, G, tiles;
};

// Rows [m0, m1) of x to two int8 values per entry, per block of `group`: with t = x * 127 /
// max|x|, hi = round(t) and lo = round((t - hi) * 128), so x = d * (128 hi + lo) with
// d = max|x| / (127 * 128) to 15 bits. One int8 alone (as llama.cpp's Q8 activations) changed
// 4% of the demo model's next-token predictions; the second byte brings that under 0.1%.
// With p.x_bytes 1 the high byte alone (lo stays unread) and d = max|x| / 127: the direct
// path's one-byte rounding (int8_direct.cpp), so a row gives the same result on either path.
inline void quantize_rows(const Problem& p, const Packed& P, int m0, int m1) {
  const bool one = p.x_bytes == 1;
  const int K = p.K, group = p.group;
  for (int m = m0; m < m1; m++) {
    const float* x = p.x + size_t(m) * K;
    int8_t* hi = const_cast<int8_t*>(P.xq) + size_t(m) * K;
    int8_t* lo = const_cast<int8_t*>(P.xlo) + size_t(m) * K;
    for (int g = 0; g < P.G; g++) {
      const float* xg = x + g * group;
      float amax = 0.0f;
      for (int i = 0; i < group; i++) amax = std::max(amax, std::fabs(xg[i]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int i = 0; i < group; i++) {
        const float t = xg[i] * inv;
        const float h = std::nearbyint(t);
        const int l = int(std::nearbyint((t - h) * 128.0f));
        hi[g * group + i] = int8_t(h);
        lo[g * group + i] = int8_t(l);
        sum += one ? int(h) : 128 * int(h) + l;
      }
      const float d = one ? amax / 127.0f : amax / 127.0f / 128.0f;
      const_cast<float*>(P.xd)[size_t(m) * P.G + g] = d;
      const_cast<float*>(P.xs)[size_t(m) * P.G + g] = d * float(sum);
    }
  }
}

inline float param(const Problem& p, const void* base, size_t i) {
  switch (p.scale_type) {
    case ScaleType::F32:
      return static_cast<const float*>(base)[i];
    case ScaleType::F16:  // F16C's conversion (both instruction sets here have it)
      return _cvtsh_ss(static_cast<const uint16_t*>(base)[i]);
    case ScaleType::BF16:
      return detail::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  }
  return 0.0f;
}

// Dwords [kq0, kq1) of 16 byte rows (`stride` apart) side by side: dst[kq][c] = row c's kq.
inline void transpose_dwords(const uint8_t* rows, size_t stride, int kq0, int kq1, uint32_t* dst) {
  for (int kq = kq0; kq < kq1; kq++) {
    for (int c = 0; c < TN; c++) std::memcpy(&dst[kq * TN + c], rows + c * stride + 4 * kq, 4);
  }
}

// One column's weights as bytes in k order (4-bit: low nibble first; Q6_K's codes, k6.h:
// per 128, 64 bytes of low nibbles and 32 of top pairs).
template <bool OFFSET8>
void unpack_column(const uint8_t* src, int K, int bits, uint8_t* row) {
  if (bits == 6) {
    const __m256i low = _mm256_set1_epi8(0x0f), pair = _mm256_set1_epi8(0x30);
    const __m256i flip = _mm256_set1_epi8(OFFSET8 ? char(0x80) : 0);
    for (int k = 0; k < K; k += 128, src += 96, row += 128) {
      const __m256i n0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
      const __m256i n1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
      const __m256i top = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 64));
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(n0, low), _mm256_and_si256(_mm256_slli_epi16(top, 4), pair)),
          _mm256_or_si256(_mm256_and_si256(n1, low), _mm256_and_si256(_mm256_slli_epi16(top, 2), pair)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n0, 4), low), _mm256_and_si256(top, pair)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n1, 4), low), _mm256_and_si256(_mm256_srli_epi16(top, 2), pair))};
      for (int i = 0; i < 4; i++) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 32 * i), _mm256_xor_si256(q[i], flip));
      }
    }
    return;
  }
  if (bits == 4) {
    // 16 packed bytes to 16 words (low nibble in the low byte, high nibble in the high one),
    // which in memory are 32 bytes in k order. K is a multiple of 32.
    const __m256i low = _mm256_set1_epi16(0x000f), high = _mm256_set1_epi16(0x0f00);
    for (int j = 0; j < K / 2; j += 16) {
      __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j)));
      __m256i v = _mm256_or_si256(_mm256_and_si256(w, low), _mm256_and_si256(_mm256_slli_epi16(w, 4), high));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 2 * j), v);
    }
  } else {
    for (int j = 0; j < K; j++) row[j] = OFFSET8 ? uint8_t(src[j] ^ 0x80) : src[j];
  }
}

// One column of Q6_K in the x8 layout's order (k6_vnni.cpp), gathered by tile_bytes: per 64
// values 16 bytes of N0 (values i, 16 + i), N1 (32 + i, 48 + i) and T (their top pairs).
template <bool OFFSET8>
void unpack_k6_chunks(const uint8_t* src, int K, uint8_t* row) {
  const __m128i low = _mm_set1_epi8(0x0f), pair = _mm_set1_epi8(0x30);
  const __m128i flip = _mm_set1_epi8(OFFSET8 ? char(0x80) : 0);
  for (int k = 0; k < K; k += 64, src += 48, row += 64) {
    const __m128i n0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i n1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i q[4] = {
        _mm_or_si128(_mm_and_si128(n0, low), _mm_and_si128(_mm_slli_epi16(t, 4), pair)),
        _mm_or_si128(_mm_and_si128(_mm_srli_epi16(n0, 4), low), _mm_and_si128(_mm_slli_epi16(t, 2), pair)),
        _mm_or_si128(_mm_and_si128(n1, low), _mm_and_si128(t, pair)),
        _mm_or_si128(_mm_and_si128(_mm_srli_epi16(n1, 4), low), _mm_and_si128(_mm_srli_epi16(t, 2), pair))};
    for (int i = 0; i < 4; i++) _mm_storeu_si128(reinterpret_cast<__m128i*>(row + 16 * i), _mm_xor_si128(q[i], flip));
  }
}

// Tile t's columns' packed bytes in MLX's order, each row_bytes long: where they lie, or for
// the x8 layout (qmm.h) each block of eight read once in order, its 16-byte units dealt out to
// the eight columns in `scratch` (TN * row_bytes bytes). Gathering one column at a time read
// each block's lines eight times over, at stride 128: a third of the tiles' packing.
inline const uint8_t* tile_bytes(const Problem& p, int t, size_t row_bytes, uint8_t* scratch) {
  if (!p.x8) return p.w + size_t(t) * TN * row_bytes;
  const int blocks = std::min(TN, p.N - t * TN) / 8;
  for (int b = 0; b < blocks; b++) {
    const uint8_t* block = p.w + (size_t(t) * TN / 8 + b) * row_bytes * 8;
    uint8_t* to = scratch + size_t(b) * 8 * row_bytes;
    for (size_t u = 0; u < row_bytes / 16; u++) {
      for (int r = 0; r < 8; r++) std::memcpy(to + r * row_bytes + 16 * u, block + 128 * u + 16 * r, 16);
    }
  }
  return scratch;
}

// Column n's scale and bias of group g in the tiles' terms (wd, wb), its parameters at `at`
// (group g's) and, for Q6_K, its super-block scale at `super_at`: Q6_K's is d * scales[g],
// with the codes' offset of 32 as the bias.
template <bool OFFSET8>
inline void tile_param(const Problem& p, size_t at, size_t super_at, float& wd, float& wb) {
  float s, b;
  if (p.bits == 6) {
    s = param(p, p.biases, super_at) * float(static_cast<const int8_t*>(p.scales)[at]);
    b = -32.0f * s;
  } else {
    s = param(p, p.scales, at);
    b = param(p, p.biases, at);
  }
  wd = s;
  wb = OFFSET8 && p.bits != 4 ? b + 128.0f * s : b;
}

// The x8 layout's parameters of tile t: each group's eight columns lie side by side, as the
// tile keeps them, so they are read and written in order (one column at a time, at stride 8,
// they took a quarter of the packing).
template <bool OFFSET8>
void x8_tile_params(const Problem& p, int t, int G, float* wd, float* wb) {
  const int blocks = std::min(TN, p.N - t * TN) / 8, supers = p.K / 256;
  for (int b = 0; b < blocks; b++) {
    const size_t block = size_t(t) * TN / 8 + b;
    for (int g = 0; g < G; g++) {
      const size_t at = (block * G + g) * 8, super_at = p.bits == 6 ? (block * supers + g / 16) * 8 : 0;
      for (int r = 0; r < 8; r++) {
        tile_param<OFFSET8>(p, at + r, super_at + r, wd[g * TN + 8 * b + r], wb[g * TN + 8 * b + r]);
      }
    }
  }
}

// Weight tile t: each column's values as bytes, then four k at a time side by side; columns
// past N are zero (scale and bias too), so they add nothing and are never stored.
template <class T>
void pack_tile(const Problem& p, const Packed& P, int t, uint8_t* rows) {
  const int K = p.K, G = P.G;
  const size_t row_bytes = size_t(K) * p.bits / 8;
  uint32_t* dst = reinterpret_cast<uint32_t*>(P.wq + size_t(t) * K * TN);
  float* wd = P.wd + size_t(t) * G * TN;
  float* wb = P.wb + size_t(t) * G * TN;
  const uint8_t* tile = tile_bytes(p, t, row_bytes, rows + size_t(TN) * K);
  for (int c = 0; c < TN; c++) {
    const int n = t * TN + c;
    uint8_t* row = rows + size_t(c) * K;
    if (n >= p.N) {
      std::memset(row, 0, size_t(K));
      for (int g = 0; g < G; g++) wd[g * TN + c] = wb[g * TN + c] = 0.0f;
      continue;
    }
    const uint8_t* bytes = tile + size_t(c) * row_bytes;
    if (p.bits == 6 && p.x8) {
      unpack_k6_chunks<T::offset8>(bytes, K, row);
    } else {
      unpack_column<T::offset8>(bytes, K, p.bits, row);
    }
    if (p.x8) continue;  // x8_tile_params below
    for (int g = 0; g < G; g++) {
      const size_t super_at = p.bits == 6 ? size_t(n) * (K / 256) + g / 16 : 0;
      tile_param<T::offset8>(p, size_t(n) * G + g, super_at, wd[g * TN + c], wb[g * TN + c]);
    }
  }
  if (p.x8) x8_tile_params<T::offset8>(p, t, G, wd, wb);
  int kq = 0;
  for (; kq + 16 <= K / 4; kq += 16) T::transpose16(rows + 4 * kq, size_t(K), dst + kq * TN);
  transpose_dwords(rows, size_t(K), kq, K / 4, dst);
}

// Output rows [m0, m0 + R) of tiles [t0, t0 + V): per group, integer sums of R x V register
// blocks (each weight load meets R rows, each activation broadcast V tiles), then one float
// step per group folds in both scales and the bias term.
// XB: the activations' bytes (p.x_bytes): with one, the high bytes' sums alone.
template <class T, int BITS, int GROUP, int XB, int R, int V>
void block(const Problem& p, const Packed& P, int m0, int t0) {
  using I = typename T::I;
  using F = typename T::F;
  constexpr int PT = TN / T::cols;  // vectors per tile
  constexpr int NV = V * PT;
  constexpr int STEPS = GROUP / 4;
  // Steps whose dot() sums one widen() takes (T::run: how many its partial sums hold).
  constexpr int RUN = std::min(STEPS, T::template run<BITS>());
  const int K = P.K, G = P.G;
  const uint8_t* w = P.wq + size_t(t0) * K * TN;
  const int8_t* x = P.xq + size_t(m0) * K;
  const int8_t* xlo = P.xlo + size_t(m0) * K;
  F acc[R][NV];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < NV; j++) acc[r][j] = T::fzero();
  for (int g = 0; g < G; g++) {
    I dots[R][NV];
    for (int r = 0; r < R; r++)
      for (int j = 0; j < NV; j++) dots[r][j] = T::zero();
    // 128 * (hi . q) + (lo . q): the high bytes' sums, shifted, then the low bytes' on top.
    // At most 127 * 255 * 128 * 128 + 64 * 255 * 128: an int32 holds it.
    for (int half = 0; half < XB; half++) {
      const int8_t* bytes = half == 0 ? x : xlo;
      if (half == 1) {
        for (int r = 0; r < R; r++)
          for (int j = 0; j < NV; j++) dots[r][j] = T::shift7(dots[r][j]);
      }
      for (int s0 = 0; s0 < STEPS; s0 += RUN) {
        I part[R][NV];
        for (int r = 0; r < R; r++)
          for (int j = 0; j < NV; j++) part[r][j] = T::zero();
        for (int s = s0; s < s0 + RUN; s++) {
          const int kq = g * STEPS + s;
          I wv[NV];
          for (int j = 0; j < NV; j++) {
            wv[j] = T::load(w + (size_t(j / PT) * K / 4 + kq) * TN * 4 + (j % PT) * T::cols * 4);
          }
          for (int r = 0; r < R; r++) {
            I xb = T::broadcast4(bytes + size_t(r) * K + 4 * kq);
            for (int j = 0; j < NV; j++) part[r][j] = T::template dot<BITS>(part[r][j], wv[j], xb);
          }
        }
        for (int r = 0; r < R; r++)
          for (int j = 0; j < NV; j++) dots[r][j] = T::template widen<BITS>(dots[r][j], part[r][j]);
      }
    }
    for (int j = 0; j < NV; j++) {
      const size_t at = (size_t(t0 + j / PT) * G + g) * TN + (j % PT) * T::cols;
      F wd = T::loadf(P.wd + at), wb = T::loadf(P.wb + at);
      for (int r = 0; r < R; r++) {
        const size_t xi = size_t(m0 + r) * G + g;
        F scaled = T::mul(T::to_float(dots[r][j]), T::set1(P.xd[xi]));
        acc[r][j] = T::fma(wb, T::set1(P.xs[xi]), T::fma(scaled, wd, acc[r][j]));
      }
    }
  }
  for (int r = 0; r < R; r++) {
    float* out = p.out + size_t(m0 + r) * p.N;
    for (int j = 0; j < NV; j++) {
      const int n = (t0 + j / PT) * TN + (j % PT) * T::cols;
      if (n + T::cols <= p.N) {
        T::storef(out + n, acc[r][j]);
      } else if (n < p.N) {
        alignas(64) float lane[T::cols];
        T::storef(lane, acc[r][j]);
        for (int i = 0; n + i < p.N; i++) out[n + i] = lane[i];
      }
    }
  }
}

// Calls block<..., R2> for a run-time R2 below T::R (the rows left over).
template <class T, int BITS, int GROUP, int XB, int V, int R2 = 1>
void block_rows(int left, const Problem& p, const Packed& P, int m0, int t0) {
  if constexpr (R2 < T::R) {
    if (left == R2) return block<T, BITS, GROUP, XB, R2, V>(p, P, m0, t0);
    block_rows<T, BITS, GROUP, XB, V, R2 + 1>(left, p, P, m0, t0);
  }
}

template <class T, int BITS, int GROUP, int XB, int V>
void tiles_all_rows(const Problem& p, const Packed& P, int t0) {
  int m = 0;
  for (; m + T::R <= P.M; m += T::R) block<T, BITS, GROUP, XB, T::R, V>(p, P, m, t0);
  if (m < P.M) block_rows<T, BITS, GROUP, XB, V>(P.M - m, p, P, m, t0);
}

// Tiles [t0, t1), V at a time: packs them and computes every row while they are in the core's
// own cache. Packing a thread's whole share first sent it out to L3 and back: a 6144x2048
// 4-bit product (an MLP's down projection), AVX-512 VNNI on Zen 5, two cores, took 3.19 ms at
// 29 rows and 30.0 at 512 that way, 2.51 and 23.7 this way (2048x6144: within noise).
template <class T, int BITS, int GROUP, int XB>
void tile_range(const Problem& p, const Packed& P, int t0, int t1) {
  thread_local std::vector<uint8_t> rows;
  rows.resize(size_t(TN) * p.K * 2);  // and the tile's gathered bytes (tile_bytes)
  int t = t0;
  for (; t + T::V <= t1; t += T::V) {
    for (int v = 0; v < T::V; v++) pack_tile<T>(p, P, t + v, rows.data());
    tiles_all_rows<T, BITS, GROUP, XB, T::V>(p, P, t);
  }
  for (; t < t1; t++) {
    pack_tile<T>(p, P, t, rows.data());
    tiles_all_rows<T, BITS, GROUP, XB, 1>(p, P, t);
  }
}

template <class T, int BITS, int GROUP>
void run(const Problem& p) {
  thread_local std::vector<int8_t> xq;  // hi, then lo
  thread_local std::vector<float> xparams;
  thread_local std::vector<uint8_t> wq;
  thread_local std::vector<float> wparams;
  const int G = p.K / GROUP, tiles = (p.N + TN - 1) / TN;
  xq.resize(size_t(2) * p.M * p.K);
  xparams.resize(size_t(2) * p.M * G);
  wq.resize(size_t(tiles) * p.K * TN + 64);
  wparams.resize(size_t(2) * tiles * G * TN);
  Packed P{xq.data(), xq.data() + size_t(p.M) * p.K, xparams.data(), xparams.data() + size_t(p.M) * G, wq.data(),
           wparams.data(), wparams.data() + size_t(tiles) * G * TN, p.M, p.N, p.K, G, tiles};
  split(size_t(p.M), size_t(p.K), 1, [&](size_t m0, size_t m1) {
    quantize_rows(p, P, int(m0), int(m1));
  });
  split(size_t(tiles), size_t(p.M) * p.K * TN / 4, T::V, [&](size_t t0, size_t t1) {
    if (p.x_bytes == 1) return tile_range<T, BITS, GROUP, 1>(p, P, int(t0), int(t1));
    tile_range<T, BITS, GROUP, 2>(p, P, int(t0), int(t1));
  });
}

template <class T>
void product(const Problem& p) {
  if (p.bits == 4 && p.group == 32) return run<T, 4, 32>(p);
  if (p.bits == 4 && p.group == 64) return run<T, 4, 64>(p);
  if (p.bits == 4 && p.group == 128) return run<T, 4, 128>(p);
  if (p.bits == 8 && p.group == 32) return run<T, 8, 32>(p);
  if (p.bits == 8 && p.group == 64) return run<T, 8, 64>(p);
  if (p.bits == 8 && p.group == 128) return run<T, 8, 128>(p);
  if (p.bits == 6 && p.group == 16) return run<T, 8, 16>(p);  // Q6_K's codes as bytes, per 16
}

}  // namespace cpu_kernels::int8
