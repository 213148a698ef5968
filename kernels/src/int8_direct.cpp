// The integer path for few rows (a decode step) on AVX-512 VNNI: the weights are read straight
// from MLX's packed layout, with no unpacking pass, and only the activations are staged.
//
// A lone row's float kernel (rows_impl.h) spends about a dozen vector operations per 16
// packed bytes turning nibbles into floats; it ran the demo model's weights at ~11 GB/s of the
// machine's ~27 GB/s read bandwidth, bound by those operations, not by memory. Here 64 packed
// bytes meet the activations in four vpdpbusd (two activation bytes, as int8_impl.h rounds
// them, times low and high nibbles), with one float step per 64 bytes.
//
// Lanes: vpdpbusd sums four byte products into each int32 lane. With 4 bits, byte j of a row
// holds values 2j (low nibble) and 2j + 1 (high), so lane L of a 64-byte chunk sums values
// 8L..8L+7 of the chunk's 128: the low nibbles meet the chunk's even activations, the high
// nibbles its odd ones, staged apart. With 8 bits lane L sums values 4L..4L+3 of 64. Either
// way a lane lies inside one group (groups are 32, 64 or 128 values), so one float step per
// chunk applies each lane's weight scale times its activation block's scale; the bias term
// (b_w * d_x * sum of the block's activations) is summed per group at the end.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "int8.h"
#include "round_avx512.h"
#include "sums_avx512.h"

namespace cpu_kernels {
namespace {

// Where one row's staged activations lie, in bytes from the row's start.
struct Layout {
  int chunks;  // 64-byte chunks of a weight row (the last may be partial)
  int chunk_values;  // activations per chunk: 128 (4 bits) or 64 (8 bits)
  // per chunk: hi even, hi odd, lo even, lo odd (4 bits) or hi, lo (8 bits); without the lo
  // bytes where the activations take one byte (Problem::x_bytes)
  int x_bytes;
  bool one_byte;
  int G, G16;  // groups, and groups rounded up to 16
  size_t lanes_at, sums_at, stride;  // lane scales [chunks][16], block sums [G16], next row

  explicit Layout(const Problem& p)
      : chunks((p.K * p.bits / 8 + 63) / 64),
        chunk_values(p.bits == 4 ? 128 : 64),
        x_bytes((p.bits == 4 ? 128 : 64) * p.x_bytes),
        one_byte(p.x_bytes == 1),
        G(p.K / p.group),
        G16((p.K / p.group + 15) / 16 * 16) {
    lanes_at = size_t(chunks) * x_bytes;
    sums_at = lanes_at + size_t(chunks) * 16 * sizeof(float);
    stride = sums_at + size_t(G16) * sizeof(float);
  }
};

template <int BITS, bool ONE>
void stage_row_as(const float* x, int group, const Layout& L, uint8_t* row) {
  std::memset(row, 0, L.stride);
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* lanes = reinterpret_cast<float*>(row + L.lanes_at);
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
    for (int i = 0; i < group; i += 32) {
      const int k = g * group + i;  // a window of 32 values
      const __m512 a = _mm512_loadu_ps(xg + i), b = _mm512_loadu_ps(xg + i + 16);
      int8_t* c = q + size_t(k / L.chunk_values) * L.x_bytes;
      const int at = k % L.chunk_values;
      if constexpr (BITS == 4) {  // evens meet low nibbles, odds high ones
        const int e = at / 2;
        const __m512 ev = _mm512_permutex2var_ps(a, even, b), od = _mm512_permutex2var_ps(a, odd, b);
        if constexpr (ONE) {
          sum = _mm512_add_epi32(sum, round_half_one(ev, inv, c + e));
          sum = _mm512_add_epi32(sum, round_half_one(od, inv, c + 64 + e));
        } else {
          sum = _mm512_add_epi32(sum, round_half(ev, inv, c + e, c + 128 + e));
          sum = _mm512_add_epi32(sum, round_half(od, inv, c + 64 + e, c + 192 + e));
        }
      } else if constexpr (ONE) {
        sum = _mm512_add_epi32(sum, round_half_one(a, inv, c + at));
        sum = _mm512_add_epi32(sum, round_half_one(b, inv, c + at + 16));
      } else {
        sum = _mm512_add_epi32(sum, round_half(a, inv, c + at, c + 64 + at));
        sum = _mm512_add_epi32(sum, round_half(b, inv, c + at + 16, c + 80 + at));
      }
    }
    sums[g] = d * float(_mm512_reduce_add_epi32(sum));
    // Each lane of the chunks this group covers takes its scale d.
    const int per_lane = BITS == 4 ? 8 : 4;
    for (int k = g * group; k < (g + 1) * group; k += per_lane) {
      lanes[(k / L.chunk_values) * 16 + (k % L.chunk_values) / per_lane] = d;
    }
  }
}

template <int BITS>
void stage_row(const float* x, int group, const Layout& L, uint8_t* row) {
  if (L.one_byte) return stage_row_as<BITS, true>(x, group, L, row);
  stage_row_as<BITS, false>(x, group, L, row);
}

// 16 of a column's scales or biases from group g as floats, zeros past its G groups.
inline __m512 params16(const Problem& p, const void* base, size_t at, int left) {
  const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
  if (p.scale_type == ScaleType::F32) return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(base) + at);
  const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(base) + at);
  if (p.scale_type == ScaleType::F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Which of a chunk's groups each lane's scale comes from, counted from the chunk's first.
template <int BITS, int GROUP>
__m512i lane_groups() {
  alignas(64) int32_t idx[16];
  for (int l = 0; l < 16; l++) idx[l] = l * (BITS == 4 ? 8 : 4) / GROUP;
  return _mm512_load_si512(idx);
}

// Adds the bias term (b_w times the rows' block sums) to a column's accumulators and stores
// one sum per row. Inlined: called, the accumulators went through memory (~15%).
template <int R>
__attribute__((always_inline)) inline void finish(const Problem& p, const Layout& L,
                                                  const uint8_t* xs, int m0, int n,
                                                  __m512 (&acc)[R]) {
  for (int g = 0; g < L.G; g += 16) {
    const __m512 b = params16(p, p.biases, size_t(n) * L.G + g, L.G - g);
    for (int r = 0; r < R; r++) {
      const __m512 sums = _mm512_loadu_ps(reinterpret_cast<const float*>(xs + L.stride * (m0 + r) + L.sums_at) + g);
      acc[r] = _mm512_fmadd_ps(b, sums, acc[r]);
    }
  }
  for (int r = 0; r < R; r++) p.out[size_t(m0 + r) * p.N + n] = sum_avx512(acc[r]);
}

// How far ahead of the chunk in hand the prefetches ask for the weights, in bytes.
constexpr size_t AHEAD = 16384;

// Column n's scales and biases into cache.
inline void prefetch_params(const Problem& p, int n) {
  if (n >= p.N) return;
  const size_t param_bytes = size_t(p.K / p.group) * (p.scale_type == ScaleType::F32 ? 4 : 2);
  const char* scales = static_cast<const char*>(p.scales) + size_t(n) * param_bytes;
  const char* biases = static_cast<const char*>(p.biases) + size_t(n) * param_bytes;
  for (size_t b = 0; b < param_bytes; b += 64) {
    __builtin_prefetch(scales + b, 0, 3);
    __builtin_prefetch(biases + b, 0, 3);
  }
}

// R staged rows times column n: integer sums per chunk, one float step per chunk. A chunk's
// groups lie inside one run of 16 groups, whose scales are converted once.
//
// One column at a time, so that a product reads its weights as one stream, each line
// prefetched AHEAD bytes before its chunk. Four columns side by side, chunk by chunk (four
// streams 1 KiB apart, prefetched 64 lines at a time, as rows_impl.h's float kernel reads)
// read 17 GB/s from memory where this reads 24-30 (2048x6144 at one row, 2-core Zen 5), and
// at 2 / 4 rows two columns side by side 9 / 8 GB/s against 16 / 11. So did four or two
// columns walked one after another, sharing the final sums (0.49 against 0.34 ms per product
// at one row, though from cache they ran 0.21 against 0.22). A lone row's one accumulator
// chain does not bind: a chunk's float step waits 4 cycles, its bytes far longer.
template <int BITS, int GROUP, int R, bool ONE>
void block(const Problem& p, const Layout& L, const uint8_t* xs, int m0, int n) {
  const size_t row_bytes = size_t(p.K) * BITS / 8;
  const __m512i idx = lane_groups<BITS, GROUP>();
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const int tail = int(row_bytes - size_t(L.chunks - 1) * 64);  // bytes in the last chunk
  const __mmask64 tail_mask = tail == 64 ? ~__mmask64(0) : (__mmask64(1) << tail) - 1;
  const uint8_t* column = p.w + size_t(n) * row_bytes;
  prefetch_params(p, n + int(AHEAD / row_bytes));
  __m512 acc[R], scales = _mm512_setzero_ps();
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  for (int ch = 0; ch < L.chunks; ch++) {
    __builtin_prefetch(column + size_t(ch) * 64 + AHEAD, 0, 3);
    const int g0 = ch * L.chunk_values / GROUP;
    if (ch == 0 || (g0 % 16 == 0 && (ch - 1) * L.chunk_values / GROUP != g0)) {
      scales = params16(p, p.scales, size_t(n) * L.G + g0, L.G - g0);
    }
    const __m512 scale = _mm512_permutexvar_ps(_mm512_add_epi32(idx, _mm512_set1_epi32(g0 % 16)), scales);
    const uint8_t* w = column + size_t(ch) * 64;
    const __m512i v = ch + 1 < L.chunks ? _mm512_loadu_si512(w) : _mm512_maskz_loadu_epi8(tail_mask, w);
    const __m512i lo = BITS == 4 ? _mm512_and_si512(v, nibble) : v;
    const __m512i hi = BITS == 4 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble) : v;
    for (int r = 0; r < R; r++) {
      const uint8_t* row = xs + L.stride * (m0 + r);
      const uint8_t* x = row + size_t(ch) * L.x_bytes;
      const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(row + L.lanes_at) + ch * 16);
      __m512i high, low, sum;
      if constexpr (ONE && BITS == 4) {  // one byte: the high bytes' products are the sum
        sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x));
        sum = _mm512_dpbusd_epi32(sum, hi, _mm512_loadu_si512(x + 64));
      } else if constexpr (ONE) {
        sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x));
      } else if constexpr (BITS == 4) {
        high = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x));
        high = _mm512_dpbusd_epi32(high, hi, _mm512_loadu_si512(x + 64));
        low = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x + 128));
        low = _mm512_dpbusd_epi32(low, hi, _mm512_loadu_si512(x + 192));
      } else {
        high = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x));
        low = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x + 64));
      }
      if constexpr (!ONE) sum = _mm512_add_epi32(_mm512_slli_epi32(high, 7), low);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(scale, d), acc[r]);
    }
  }
  finish<R>(p, L, xs, m0, n, acc);
}

// Columns [n0, n1) of rows [m0, m0 + R), one at a time (block says why). Prefetches may look
// past n1 (into the next thread's columns, or past the weights: prefetches do not fault).
template <int BITS, int GROUP, int R>
void rows_block(const Problem& p, const Layout& L, const uint8_t* xs, int m0, int n0, int n1, int) {
  for (int n = n0; n < n1; n++) {
    if (L.one_byte) {
      block<BITS, GROUP, R, true>(p, L, xs, m0, n);
    } else {
      block<BITS, GROUP, R, false>(p, L, xs, m0, n);
    }
  }
}

#include "int8_direct_loops.h"  // stage() and columns(): rows, blocks, formats

}  // namespace

const DirectInt8* vnni_direct_int8() {
  // Whole decode steps of the demo model, direct / float path (bench/int8_decode.py, 2-core
  // AVX-512 VNNI, shared machine, two runs): 4-bit 0.91-0.97 at 1 row, 0.81-0.93 at 2,
  // 0.74-1.02 at 4, and level with the tiles at 5-8; 8-bit 0.93-1.05 at 1, 0.80-1.00 at 2,
  // 0.88-1.07 at 4 (steps are memory-bound: from cache its products run 1.6-2x the float
  // path's). Speculative verification takes the path of its plain step's row count
  // (set_int8_rows), whatever the bound.
  // Products of 48 weights from memory, 2-core Sapphire Rapids VM, ms each (auto before: the
  // tiles from 6 rows, floats at 5): 2048x6144 4-bit g32, direct vs auto at 5 / 8 / 12 / 16
  // rows 1.43 / 1.95 / 2.68 / 4.72 against 2.33 / 2.40 / 3.01 / 3.88; the demo's 576x1536 at 8
  // / 12 rows 0.16 / 0.27 against 0.19 / 0.25, 1536x576 0.12 / 0.21 against 0.18 / 0.21: up to 8
  // rows. With one-byte activations 2048x6144 at 16 / 24 / 32 rows 2.51 / 4.29 / 5.60 against
  // auto's 3.88 / 4.79 / 5.67, the demo's at 16 0.30 / 0.17 against 0.32 / 0.27: up to 16.
  // These bounds were measured with the four-column walk block() replaced; the one-column
  // walk read 2 / 4 rows from memory 1.7x / 1.4x faster, so they may now be low.
  static const DirectInt8 k{"avx512vnni", 8, 16, 0, row_bytes, stage, columns};
  return vnni_int8_kernels() != nullptr ? &k : nullptr;  // the same instructions
}

}  // namespace cpu_kernels
