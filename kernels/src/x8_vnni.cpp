// The direct integer path over weights interleaved eight columns at a time (qmm.h's x8
// layout), on AVX-512 VNNI: decode's few rows read a product's weights as one stream.
//
// Why a layout of its own: MLX's layout keeps each column's bytes together, so reading eight
// columns at once means eight streams (which read 17 GB/s from memory where one reads 24-30,
// int8_direct.cpp's block says) and reading one at a time leaves a lone chain of dependent
// sums per column, with its scales and biases fetched from two other places per column. Here
// the weights of eight columns for one unit (16 bytes a column: 32 values at 4 bits, 16 at 8)
// lie side by side (128 bytes), units in k order, blocks of eight columns one after another,
// and their scales and biases are interleaved alike (eight per group): one stream of weights
// and one of parameters for the whole product, two registers of four columns each per unit.
// A stand-alone test on the 2-core Zen 5 VM (2048x6144 4-bit g32, 40 matrices, 2 threads,
// the machine busy) read 20-22 GB/s this way against 13.7 for the one-column walk, where a
// plain read of the same bytes ran 28.5.
//
// Lanes: each 128-bit lane of a register holds one column's unit; vpdpbusd sums four of its
// byte products into each int32 lane. The activations of a unit are staged once per row as
// 16-byte pieces and broadcast to the four lanes: with 4 bits the low nibbles (values 2j) meet
// the unit's even activations and the high nibbles its odd ones, each as a high byte (and a
// low byte at 15 bits, int8_impl.h's rounding); with 8 bits byte j meets value j. A unit lies
// inside one group (groups are 32 to 128 values), so one float step per unit applies the
// column's scale times the row's block scale; the bias term (b_w * d_x * sum of the block's
// activations) is added once per group.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "int8.h"
#include "round_avx512.h"

namespace cpu_kernels {
namespace {

constexpr int COLS = 8;  // columns a block interleaves
constexpr int UNIT = 16;  // bytes of one column in a unit

// Where one row's staged activations lie, in bytes from the row's start.
struct Layout {
  int units;  // units of a column: K * bits / 8 / 16
  int unit_values;  // activations per unit: 32 (4 bits) or 16 (8 bits)
  int unit_bytes;  // staged bytes per unit: pieces of 16 (4 bits: hi even, hi odd, lo even,
                   // lo odd; 8 bits: hi, lo; without the lo pieces at one byte)
  bool one_byte;
  int G;  // groups
  size_t scales_at, sums_at, stride;  // block scales [G], block sums [G], next row

  explicit Layout(const Problem& p)
      : units(p.K * p.bits / 8 / UNIT),
        unit_values(p.bits == 4 ? 32 : 16),
        unit_bytes((p.bits == 4 ? 32 : 16) * p.x_bytes),
        one_byte(p.x_bytes == 1),
        G(p.K / p.group) {
    scales_at = size_t(units) * unit_bytes;
    sums_at = scales_at + size_t(G) * sizeof(float);
    stride = (sums_at + size_t(G) * sizeof(float) + 63) / 64 * 64;
  }
};

template <int BITS, bool ONE>
void stage_row_as(const float* x, int group, const Layout& L, uint8_t* row) {
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* scales = reinterpret_cast<float*>(row + L.scales_at);
  float* sums = reinterpret_cast<float*>(row + L.sums_at);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int g = 0; g < L.G; g++) {
    const float* xg = x + size_t(g) * group;
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < group; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xg + i)));
    const float amax = _mm512_reduce_max_ps(m);
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const float d = ONE ? amax / 127.0f : amax / 127.0f / 128.0f;
    __m512i sum = _mm512_setzero_si512();
    for (int i = 0; i < group; i += 32) {  // a window of 32 values: one unit (4 bits) or two
      const __m512 a = _mm512_loadu_ps(xg + i), b = _mm512_loadu_ps(xg + i + 16);
      int8_t* u = q + size_t((g * group + i) / L.unit_values) * L.unit_bytes;
      if constexpr (BITS == 4) {
        const __m512 ev = _mm512_permutex2var_ps(a, even, b), od = _mm512_permutex2var_ps(a, odd, b);
        if constexpr (ONE) {
          sum = _mm512_add_epi32(sum, round_half_one(ev, inv, u));
          sum = _mm512_add_epi32(sum, round_half_one(od, inv, u + 16));
        } else {
          sum = _mm512_add_epi32(sum, round_half(ev, inv, u, u + 32));
          sum = _mm512_add_epi32(sum, round_half(od, inv, u + 16, u + 48));
        }
      } else if constexpr (ONE) {
        sum = _mm512_add_epi32(sum, round_half_one(a, inv, u));
        sum = _mm512_add_epi32(sum, round_half_one(b, inv, u + L.unit_bytes));
      } else {
        sum = _mm512_add_epi32(sum, round_half(a, inv, u, u + 16));
        sum = _mm512_add_epi32(sum, round_half(b, inv, u + L.unit_bytes, u + L.unit_bytes + 16));
      }
    }
    scales[g] = d;
    sums[g] = d * float(_mm512_reduce_add_epi32(sum));
  }
}

template <int BITS>
void stage_row(const float* x, int group, const Layout& L, uint8_t* row) {
  if (L.one_byte) return stage_row_as<BITS, true>(x, group, L, row);
  stage_row_as<BITS, false>(x, group, L, row);
}

// Eight columns' scales or biases of one group, as floats.
inline __m256 params8(const Problem& p, const void* base, size_t at) {
  if (p.scale_type == ScaleType::F32) return _mm256_loadu_ps(static_cast<const float*>(base) + at);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + at));
  if (p.scale_type == ScaleType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m512i piece(const int8_t* x) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}

// How far ahead of the unit in hand the prefetches ask for the weights, in bytes.
constexpr size_t AHEAD = 4096;

// One unit's integer sums of row `x` (its staged unit) against the unit's two registers of
// four columns (lo/hi: the nibbles at 4 bits; the bytes themselves, lo, at 8).
template <int BITS, bool ONE>
__attribute__((always_inline)) inline void unit_sums(const int8_t* x, const __m512i (&lo)[2],
                                                     const __m512i (&hi)[2], __m512i (&s)[2]) {
  const __m512i zero = _mm512_setzero_si512();
  if constexpr (BITS == 4) {
    const __m512i he = piece(x), ho = piece(x + 16);
    for (int h = 0; h < 2; h++) s[h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo[h], he), hi[h], ho);
    if constexpr (!ONE) {
      const __m512i le = piece(x + 32), lo_odd = piece(x + 48);
      for (int h = 0; h < 2; h++) {
        const __m512i l = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo[h], le), hi[h], lo_odd);
        s[h] = _mm512_add_epi32(_mm512_slli_epi32(s[h], 7), l);
      }
    }
  } else {
    const __m512i xh = piece(x);
    for (int h = 0; h < 2; h++) s[h] = _mm512_dpbusd_epi32(zero, lo[h], xh);
    if constexpr (!ONE) {
      const __m512i xl = piece(x + 16);
      for (int h = 0; h < 2; h++) s[h] = _mm512_add_epi32(_mm512_slli_epi32(s[h], 7), _mm512_dpbusd_epi32(zero, lo[h], xl));
    }
  }
}

// R staged rows times the eight columns of block c.
template <int BITS, int GROUP, int R, bool ONE>
void block(const Problem& p, const Layout& L, const uint8_t* xs, int m0, int c) {
  constexpr int PER_GROUP = GROUP / (BITS == 4 ? 32 : 16);  // units a group holds
  const uint8_t* w = p.w + size_t(c) * L.units * COLS * UNIT;
  const size_t params_at = size_t(c) * L.G * COLS;
  const size_t param_bytes = p.scale_type == ScaleType::F32 ? 4 : 2;
  const char* scales_line = static_cast<const char*>(p.scales) + params_at * param_bytes;
  const char* biases_line = static_cast<const char*>(p.biases) + params_at * param_bytes;
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const __m512i first4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i last4 = _mm512_add_epi32(first4, _mm512_set1_epi32(4));
  __m512 acc[R][2];
  __m256 bias[R];
  for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps(), bias[r] = _mm256_setzero_ps();
  for (int g = 0; g < L.G; g++) {
    if (g % 4 == 0) {  // a line of parameters holds four groups at 16 bits (two at 32)
      __builtin_prefetch(scales_line + (g + 32) * COLS * param_bytes, 0, 3);
      __builtin_prefetch(biases_line + (g + 32) * COLS * param_bytes, 0, 3);
    }
    const __m512 scale8 = _mm512_castps256_ps512(params8(p, p.scales, params_at + size_t(g) * COLS));
    const __m512 scale[2] = {_mm512_permutexvar_ps(first4, scale8), _mm512_permutexvar_ps(last4, scale8)};
    const __m256 b = params8(p, p.biases, params_at + size_t(g) * COLS);
    for (int r = 0; r < R; r++) {
      const float* sums = reinterpret_cast<const float*>(xs + L.stride * (m0 + r) + L.sums_at);
      bias[r] = _mm256_fmadd_ps(b, _mm256_set1_ps(sums[g]), bias[r]);
    }
    for (int k = 0; k < PER_GROUP; k++) {
      const int u = g * PER_GROUP + k;
      const uint8_t* wu = w + size_t(u) * COLS * UNIT;
      __builtin_prefetch(wu + AHEAD, 0, 3);
      __builtin_prefetch(wu + AHEAD + 64, 0, 3);
      const __m512i v[2] = {_mm512_loadu_si512(wu), _mm512_loadu_si512(wu + 64)};
      __m512i lo[2], hi[2];
      for (int h = 0; h < 2; h++) {
        lo[h] = BITS == 4 ? _mm512_and_si512(v[h], nibble) : v[h];
        hi[h] = BITS == 4 ? _mm512_and_si512(_mm512_srli_epi16(v[h], 4), nibble) : v[h];
      }
      for (int r = 0; r < R; r++) {
        const uint8_t* row = xs + L.stride * (m0 + r);
        __m512i s[2];
        unit_sums<BITS, ONE>(reinterpret_cast<const int8_t*>(row) + size_t(u) * L.unit_bytes, lo, hi, s);
        const __m512 d = _mm512_set1_ps(reinterpret_cast<const float*>(row + L.scales_at)[g]);
        for (int h = 0; h < 2; h++) {
          acc[r][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[h]), _mm512_mul_ps(scale[h], d), acc[r][h]);
        }
      }
    }
  }
  for (int r = 0; r < R; r++) {  // each column's four lanes, then its bias term
    alignas(64) float lanes[32], b[8];
    _mm512_store_ps(lanes, acc[r][0]);
    _mm512_store_ps(lanes + 16, acc[r][1]);
    _mm256_store_ps(b, bias[r]);
    float* out = p.out + size_t(m0 + r) * p.N + size_t(c) * COLS;
    for (int j = 0; j < COLS; j++) {
      out[j] = (lanes[4 * j] + lanes[4 * j + 1]) + (lanes[4 * j + 2] + lanes[4 * j + 3]) + b[j];
    }
  }
}

// Columns [n0, n1) (multiples of 8) of rows [m0, m0 + R): block by block, so that every row
// meets a block's weights (8 KiB at 2,048 4-bit features) while they are in the core's cache.
template <int BITS, int GROUP, int R>
void rows_block(const Problem& p, const Layout& L, const uint8_t* xs, int m0, int n0, int n1, int) {
  for (int c = n0 / COLS; c < n1 / COLS; c++) {
    if (L.one_byte) {
      block<BITS, GROUP, R, true>(p, L, xs, m0, c);
    } else {
      block<BITS, GROUP, R, false>(p, L, xs, m0, c);
    }
  }
}

#include "int8_direct_loops.h"  // stage() and columns(): rows, blocks, formats

}  // namespace

const DirectInt8* vnni_direct_x8() {
  // Past these rows the integer tiles read the interleaved columns (int8_impl.h's pack_tile).
  // Higher than over MLX's layout (8 and 16, int8_direct.cpp): the tiles' packing of every
  // weight costs about as much as 10 more rows, and this walk's rows share each weight read.
  // A Qwen3-1.7B-shaped import's decode products (4-bit x8 and Q6_K x8), two cores, direct
  // against tiles: 12 / 16 / 20 / 24 / 28 / 33 rows 167 / 224 / 277 / 337 / 399 / 471 ms
  // against 281 / 314 / 358 / 386 / 441 / 479; with one-byte activations 20 / 24 / 32 rows
  // 184 / 225 / 300 against 289 / 326 / 376.
  static const DirectInt8 k{"avx512vnni-x8", X8_DIRECT_ROWS, X8_DIRECT_ROWS_ONE_BYTE, 0, row_bytes, stage, columns};
  return vnni_int8_kernels() != nullptr ? &k : nullptr;  // the same instructions
}

}  // namespace cpu_kernels
