// The direct integer path (int8_direct.cpp's, for few rows: a decode step) on AVX2: the
// weights read straight from MLX's packed layout, the activations staged once per call.
//
// On AVX2 the float kernel (rows_impl.h) turns each nibble into a float before its FMA: at
// real widths (2048x6144, 4-bit) it ran ~13 GB/s of weights from cache on two cores, under
// this machine class's ~27 GB/s copy bandwidth, so a decode step was bound by those
// operations, not by memory. Here 32 packed bytes meet the activations in four vpmaddubsw
// (two activation bytes, as int8_impl.h rounds them, times low and high nibbles), two
// vpmaddwd and one float step.
//
// Lanes: vpmaddubsw sums two byte products into an int16 lane and vpmaddwd two of those into
// an int32 lane, so int32 lane L of a 32-byte chunk sums bytes 4L..4L+3. With 4 bits, byte j
// holds values 2j (low nibble) and 2j + 1 (high): lane L covers values 8L..8L+7 of the
// chunk's 64, the low nibbles meeting the even activations and the high nibbles the odd ones,
// staged apart. With 8 bits lane L covers values 4L..4L+3 of 32; the weights are read as
// q - 128 and multiplied through their sign (|w| times sign(w) * x), since 255 * 127 * 2
// overflows the int16 pair, and the offset returns through the bias (b + 128 s), as the
// tiled AVX2 path does. Either way a lane lies inside one group (32, 64 or 128 values), so
// one float step per chunk applies each lane's weight scale times its activation block's
// scale; the bias term (b_w * d_x * the block's sum of activations) is added per group last.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "int8.h"

namespace cpu_kernels {
namespace {

// Where one row's staged activations lie, in bytes from the row's start.
struct Layout {
  int chunks;  // 32-byte chunks of a weight row (a 4-bit row's last may hold 16)
  int chunk_values;  // activations per chunk: 64 (4 bits) or 32 (8 bits)
  // per chunk: hi even, hi odd, lo even, lo odd (4 bits) or hi, lo (8 bits); without the lo
  // bytes where the activations take one byte (Problem::x_bytes)
  int x_bytes;
  bool one_byte;
  int G, G8;  // groups, and groups rounded up to 8
  size_t lanes_at, sums_at, stride;  // lane scales [chunks][8], block sums [G8], next row

  explicit Layout(const Problem& p)
      : chunks((p.K * p.bits / 8 + 31) / 32),
        chunk_values(p.bits == 4 ? 64 : 32),
        x_bytes((p.bits == 4 ? 64 : 32) * p.x_bytes),
        one_byte(p.x_bytes == 1),
        G(p.K / p.group),
        G8((p.K / p.group + 7) / 8 * 8) {
    lanes_at = size_t(chunks) * x_bytes;
    sums_at = lanes_at + size_t(chunks) * 8 * sizeof(float);
    stride = sums_at + size_t(G8) * sizeof(float);
  }
};

// The low byte of each int32 lane, 8 bytes stored at `out`.
inline void store_bytes(__m256i v, int8_t* out) {
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i b = _mm256_shuffle_epi8(v, pick);
  const __m128i both = _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), both);
}

// 8 activations as int8_impl.h's quantize_rows rounds them (the same float operations in the
// same order, so the same bytes): t = x * inv, hi = round(t), lo = round((t - hi) * 128).
// Stores 8 hi and 8 lo bytes and returns their 128 hi + lo.
inline __m256i round8(__m256 x, __m256 inv, int8_t* hi, int8_t* lo) {
  const __m256 t = _mm256_mul_ps(x, inv);
  const __m256 h = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i l = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(t, h), _mm256_set1_ps(128.0f)));
  const __m256i hv = _mm256_cvtps_epi32(h);
  store_bytes(hv, hi);
  store_bytes(l, lo);
  return _mm256_add_epi32(_mm256_slli_epi32(hv, 7), l);
}

// As round8, the high byte only (x_bytes 1: t = x * 127 / amax rounded, llama.cpp's Q8).
inline __m256i round8_one(__m256 x, __m256 inv, int8_t* hi) {
  const __m256i hv = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  store_bytes(hv, hi);
  return hv;
}

inline float max8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline int sum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

template <int BITS, bool ONE>
void stage_row_as(const float* x, int group, const Layout& L, uint8_t* row) {
  std::memset(row, 0, L.stride);
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* lanes = reinterpret_cast<float*>(row + L.lanes_at);
  float* sums = reinterpret_cast<float*>(row + L.sums_at);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int g = 0; g < L.G; g++) {
    const float* xg = x + size_t(g) * group;
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < group; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xg + i)));
    const float amax = max8(m);
    const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const float d = ONE ? amax / 127.0f : amax / 127.0f / 128.0f;
    __m256i sum = _mm256_setzero_si256();
    for (int i = 0; i < group; i += 16) {
      const int k = g * group + i;  // a window of 16 values
      const __m256 a = _mm256_loadu_ps(xg + i), b = _mm256_loadu_ps(xg + i + 8);
      int8_t* c = q + size_t(k / L.chunk_values) * L.x_bytes;
      const int at = k % L.chunk_values;
      if constexpr (BITS == 4) {  // evens meet low nibbles, odds high ones
        const __m256 even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
        const __m256 odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
        const int e = at / 2;
        if constexpr (ONE) {
          sum = _mm256_add_epi32(sum, round8_one(even, inv, c + e));
          sum = _mm256_add_epi32(sum, round8_one(odd, inv, c + 32 + e));
        } else {
          sum = _mm256_add_epi32(sum, round8(even, inv, c + e, c + 64 + e));
          sum = _mm256_add_epi32(sum, round8(odd, inv, c + 32 + e, c + 96 + e));
        }
      } else if constexpr (ONE) {
        sum = _mm256_add_epi32(sum, round8_one(a, inv, c + at));
        sum = _mm256_add_epi32(sum, round8_one(b, inv, c + at + 8));
      } else {
        sum = _mm256_add_epi32(sum, round8(a, inv, c + at, c + 32 + at));
        sum = _mm256_add_epi32(sum, round8(b, inv, c + at + 8, c + 40 + at));
      }
    }
    sums[g] = d * float(sum8(sum));
    // Each lane of the chunks this group covers takes its scale d.
    const int per_lane = BITS == 4 ? 8 : 4;
    for (int k = g * group; k < (g + 1) * group; k += per_lane) {
      lanes[(k / L.chunk_values) * 8 + (k % L.chunk_values) / per_lane] = d;
    }
  }
}

template <int BITS>
void stage_row(const float* x, int group, const Layout& L, uint8_t* row) {
  if (L.one_byte) return stage_row_as<BITS, true>(x, group, L, row);
  stage_row_as<BITS, false>(x, group, L, row);
}

// 8 of a column's scales or biases from group `at` on as floats, zeros past its last group.
inline __m256 params8(const Problem& p, const void* base, size_t at, int left) {
  if (p.scale_type == ScaleType::F32) {
    if (left >= 8) return _mm256_loadu_ps(static_cast<const float*>(base) + at);
    alignas(32) float part[8] = {};
    std::memcpy(part, static_cast<const float*>(base) + at, sizeof(float) * left);
    return _mm256_load_ps(part);
  }
  alignas(16) uint16_t part[8] = {};  // half and bfloat16 zeros are zero bits
  const uint16_t* from = static_cast<const uint16_t*>(base) + at;
  if (left < 8) from = static_cast<const uint16_t*>(std::memcpy(part, from, sizeof(uint16_t) * left));
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
  if (p.scale_type == ScaleType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Which of a chunk's groups each lane's scale comes from, counted from the chunk's first.
template <int BITS, int GROUP>
__m256i lane_groups() {
  alignas(32) int32_t idx[8];
  for (int l = 0; l < 8; l++) idx[l] = l * (BITS == 4 ? 8 : 4) / GROUP;
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
}

// One vector's sum, in one fixed order whatever the pass's width: a column's result does not
// depend on its neighbours, so a row computes alike in any batch (speculative verification).
inline float sum_floats(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Adds the bias term (b_w, plus 128 s_w for 8 bits, times the rows' block sums) to a block's
// accumulators and stores one sum per row and column.
template <int BITS, int R, int C>
__attribute__((always_inline)) inline void finish(const Problem& p, const Layout& L, const uint8_t* xs,
                                                  int m0, int n, __m256 (&acc)[R][C]) {
  for (int g = 0; g < L.G; g += 8) {
    __m256 b[C];
    for (int c = 0; c < C; c++) {
      const size_t at = size_t(n + c) * L.G + g;
      b[c] = params8(p, p.biases, at, L.G - g);
      if constexpr (BITS == 8) b[c] = _mm256_fmadd_ps(params8(p, p.scales, at, L.G - g), _mm256_set1_ps(128.0f), b[c]);
    }
    for (int r = 0; r < R; r++) {
      const __m256 sums = _mm256_loadu_ps(reinterpret_cast<const float*>(xs + L.stride * (m0 + r) + L.sums_at) + g);
      for (int c = 0; c < C; c++) acc[r][c] = _mm256_fmadd_ps(b[c], sums, acc[r][c]);
    }
  }
  for (int r = 0; r < R; r++) {
    float* out = p.out + size_t(m0 + r) * p.N + n;
    for (int c = 0; c < C; c++) out[c] = sum_floats(acc[r][c]);
  }
}

// How far ahead a block's weights are fetched, in blocks of C columns: the block after next,
// one line per two chunks as the block is read (so that the requests spread over the block
// rather than coming in one burst). On the 1.7B shape's 197 products (1.2 GB, streamed from
// memory) the products took 0.80 of the time they took with no software prefetch; 4 or 16
// blocks ahead measured no better.
constexpr int PREFETCH_BLOCKS = 2;

// A chunk of one column's packed weights: 32 bytes, or the 16 a 4-bit row may end on.
inline __m256i load_chunk(const uint8_t* w, bool half) {
  if (half) return _mm256_inserti128_si256(_mm256_setzero_si256(), _mm_loadu_si128(reinterpret_cast<const __m128i*>(w)), 0);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
}

// One chunk's integer sum for one row and column: 128 * (hi-byte products) + lo-byte ones,
// or the hi-byte products alone where the activations take one byte.
template <int BITS, bool ONE>
inline __m256i chunk_sum(__m256i lo, __m256i hi, const uint8_t* x) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (ONE) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    if constexpr (BITS == 4) {  // pairs at most 2 * 15 * 127, two of them: int16
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32));
      return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_maddubs_epi16(hi, x1)), ones);
    } else {
      return _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_sign_epi8(x0, hi)), ones);
    }
  }
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32));
  __m256i high, low;
  if constexpr (BITS == 4) {  // lo, hi: the nibbles (pairs at most 2 * 15 * 127: int16)
    const __m256i x2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64));
    const __m256i x3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 96));
    high = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_maddubs_epi16(hi, x1));
    low = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x2), _mm256_maddubs_epi16(hi, x3));
  } else {  // lo: |q - 128|, hi: q - 128 (whose sign the activations take)
    high = _mm256_maddubs_epi16(lo, _mm256_sign_epi8(x0, hi));
    low = _mm256_maddubs_epi16(lo, _mm256_sign_epi8(x1, hi));
  }
  return _mm256_add_epi32(_mm256_madd_epi16(high, _mm256_set1_epi16(128)), _mm256_madd_epi16(low, ones));
}

// R staged rows times C columns from n: integer sums per chunk, one float step per chunk.
// A chunk's groups lie inside one run of 8 groups, whose scales are converted once.
template <int BITS, int GROUP, int R, int C, bool ONE>
void block(const Problem& p, const Layout& L, const uint8_t* xs, int m0, int n, size_t ahead) {
  const size_t row_bytes = size_t(p.K) * BITS / 8;
  const __m256i idx = lane_groups<BITS, GROUP>();
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const bool half_tail = row_bytes % 32 != 0;
  __m256 acc[R][C], scales[C];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
  for (int ch = 0; ch < L.chunks; ch++) {
    const int g0 = ch * L.chunk_values / GROUP;
    if (ch == 0 || (g0 % 8 == 0 && (ch - 1) * L.chunk_values / GROUP != g0)) {
      for (int c = 0; c < C; c++) scales[c] = params8(p, p.scales, size_t(n + c) * L.G + g0, L.G - g0);
    }
    const __m256i at = _mm256_add_epi32(idx, _mm256_set1_epi32(g0 % 8));
    const bool half = half_tail && ch + 1 == L.chunks;
    for (int c = 0; c < C; c++) {
      const uint8_t* wc = p.w + size_t(n + c) * row_bytes + size_t(ch) * 32;
      if (ahead != 0 && ch % 2 == 0) __builtin_prefetch(wc + ahead, 0, 3);
      const __m256i v = load_chunk(wc, half);
      __m256i lo, hi;
      if constexpr (BITS == 4) {
        lo = _mm256_and_si256(v, nibble);
        hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
      } else {
        hi = _mm256_xor_si256(v, _mm256_set1_epi8(char(0x80)));
        lo = _mm256_abs_epi8(hi);
      }
      const __m256 scale = _mm256_permutevar8x32_ps(scales[c], at);
      for (int r = 0; r < R; r++) {
        const uint8_t* row = xs + L.stride * (m0 + r);
        const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(row + L.lanes_at) + ch * 8);
        const __m256i sum = chunk_sum<BITS, ONE>(lo, hi, row + size_t(ch) * L.x_bytes);
        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(scale, d), acc[r][c]);
      }
    }
  }
  finish<BITS, R, C>(p, L, xs, m0, n, acc);
}

// Columns [n0, n1) of rows [m0, m0 + R), C at a time (a lone row needs independent chains).
template <int BITS, int GROUP, int R>
void rows_block(const Problem& p, const Layout& L, const uint8_t* xs, int m0, int n0, int n1, int ahead_to) {
  constexpr int C = R == 1 ? 4 : 2;  // 2 at one row measured alike, 8 slower (spills)
  const size_t row_bytes = size_t(p.K) * BITS / 8;
  int n = n0;
  for (; n + C <= n1; n += C) {
    const size_t ahead = n + (PREFETCH_BLOCKS + 1) * C <= ahead_to ? PREFETCH_BLOCKS * C * row_bytes : 0;
    if (L.one_byte) {
      block<BITS, GROUP, R, C, true>(p, L, xs, m0, n, ahead);
    } else {
      block<BITS, GROUP, R, C, false>(p, L, xs, m0, n, ahead);
    }
  }
  for (; n < n1; n++) {
    if (L.one_byte) {
      block<BITS, GROUP, R, 1, true>(p, L, xs, m0, n, 0);
    } else {
      block<BITS, GROUP, R, 1, false>(p, L, xs, m0, n, 0);
    }
  }
}

#include "int8_direct_loops.h"  // stage() and columns(): rows, blocks, formats

}  // namespace

const DirectInt8* avx2_direct_int8() {
  // Whole decode steps (bench/int8_decode.py, bench/real_width.py; 2-core Zen 3, shared):
  // the demo model (576 features in, 1536 for its down projection) took 1.02-1.06 of the float
  // path's time at 1-4 rows (4-bit), 1.07-1.14 (8-bit); the Qwen3-1.7B shape (2048 and 6144)
  // 0.83-0.86 at one row. Auto takes it from 1024 features, and up to 15 rows (a batch of
  // streams, a speculative verification): 24 products of 2048x6144 4-bit from memory took
  // 2.7 / 4.6 / 6.2 ms each at 8 / 12 / 16 rows against 3.7 / 6.3 / 6.8 for the float rows
  // path and 6.1 / 6.6 / 6.9 for the panels (which take over from 16).
  // One-byte activations keep the same bound: no AVX2-only machine here to measure past it.
  static const DirectInt8 k{"avx2", 15, 15, 1024, row_bytes, stage, columns};
  return avx2_int8_kernels() != nullptr ? &k : nullptr;  // the same instructions
}

}  // namespace cpu_kernels
