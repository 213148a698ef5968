// Q6_K's weights (k6.h) on the direct integer path, AVX-512 VNNI: per 128 values of a column
// 96 bytes are read (64 of low nibbles, 32 of top bits) and unpacked in registers to 128 code
// bytes (0..63), which meet the staged activations in one vpdpbusd per activation byte.
// vpdpbusd's lane L sums values 4L..4L+3 of the chunk, inside one 16-value block, so one
// float step per chunk applies each lane's weight scale (d * scales[block]) times its
// activations' scale; the codes' offset of 32 returns once per super-block through the
// blocks' activation sums.
#include <immintrin.h>

#include <algorithm>

#include "k6.h"
#include "sums_avx512.h"

namespace cpu_kernels {
namespace {

// The 128 codes of a pair of chunks (96 bytes at w) as two registers of bytes, in value
// order: the low nibbles' register masked and shifted, the top pairs' 32 bytes twice side by
// side, shifted so that each value's two bits land at bits 4 and 5.
inline void codes(const uint8_t* w, __m512i& q0, __m512i& q1) {
  const __m512i nibbles = _mm512_loadu_si512(w), low = _mm512_set1_epi8(0x0f), pair = _mm512_set1_epi8(0x30);
  const __m512i top = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64)));
  const __m512i up = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4), down = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
  const __m512i t0 = _mm512_and_si512(_mm512_sllv_epi64(top, up), pair);  // values 0-31: bits 0-1, 32-63: 2-3
  const __m512i t1 = _mm512_and_si512(_mm512_srlv_epi64(top, down), pair);  // 64-95: bits 4-5, 96-127: 6-7
  q0 = _mm512_or_si512(_mm512_and_si512(nibbles, low), t0);
  q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(nibbles, 4), low), t1);
}

// 16 floats: a column's d * scales for one super-block.
inline __m512 block_scales(const Problem& p, int n, int superblock) {
  const int8_t* sc = static_cast<const int8_t*>(p.scales) + size_t(n) * (p.K / K6_GROUP) + superblock * 16;
  const uint16_t* d = static_cast<const uint16_t*>(p.biases) + size_t(n) * (p.K / K6_SUPER) + superblock;
  const __m512 s = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))));
  return _mm512_mul_ps(s, _mm512_set1_ps(_cvtsh_ss(*d)));
}

// R rows (one chunk's activations) times a column's codes, into the accumulators.
template <int R, bool ONE>
__attribute__((always_inline)) inline void chunk(const K6Layout& L, const uint8_t* xs, int m0, int ch,
                                                 __m512i q, __m512 scale, __m512 (&acc)[R]) {
  for (int r = 0; r < R; r++) {
    const uint8_t* row = xs + L.stride * (m0 + r);
    const uint8_t* x = row + size_t(ch) * L.x_bytes;
    const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(row + L.lanes_at) + ch * 16);
    __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, _mm512_loadu_si512(x));
    if constexpr (!ONE) {
      const __m512i low = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, _mm512_loadu_si512(x + 64));
      sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 7), low);
    }
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(scale, d), acc[r]);
  }
}

// How far ahead of the chunk pair in hand the prefetches ask for the weights, in bytes.
constexpr size_t AHEAD = 16384;

// R rows times column n, walked whole with each line prefetched AHEAD bytes before its chunk
// pair: one stream from memory, as int8_direct.cpp's block (why there). Four columns side by
// side read 2048x6144 at one row in 0.42 ms from memory, one at a time 0.29 (2-core Zen 5).
template <int R, bool ONE>
void block(const Problem& p, const K6Layout& L, const uint8_t* xs, int m0, int n) {
  const size_t row_bytes = size_t(p.K) * K6_BITS / 8;
  __m512i lane_block[4];  // chunk j of a super-block: lane L takes block 4j + L / 4
  for (int j = 0; j < 4; j++) {
    alignas(64) int32_t idx[16];
    for (int l = 0; l < 16; l++) idx[l] = 4 * j + l / 4;
    lane_block[j] = _mm512_load_si512(idx);
  }
  const uint8_t* column = p.w + size_t(n) * row_bytes;
  __m512 acc[R], scales = _mm512_setzero_ps();
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  for (int ch = 0; ch < L.chunks; ch += 2) {
    const uint8_t* w = column + size_t(ch / 2) * 96;
    __builtin_prefetch(w + AHEAD, 0, 3);
    __builtin_prefetch(w + AHEAD + 64, 0, 3);
    const int j = ch % 4;
    if (j == 0) {  // a super-block: its scales, and the offset's term sum(-32 * scale * x)
      scales = block_scales(p, n, ch / 4);
      for (int r = 0; r < R; r++) {
        const float* sums = reinterpret_cast<const float*>(xs + L.stride * (m0 + r) + L.sums_at) + ch * 4;
        const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(sums), _mm512_set1_ps(-32.0f));
        acc[r] = _mm512_fmadd_ps(scales, s, acc[r]);
      }
    }
    __m512i q0, q1;
    codes(w, q0, q1);
    chunk<R, ONE>(L, xs, m0, ch, q0, _mm512_permutexvar_ps(lane_block[j], scales), acc);
    chunk<R, ONE>(L, xs, m0, ch + 1, q1, _mm512_permutexvar_ps(lane_block[j + 1], scales), acc);
  }
  for (int r = 0; r < R; r++) p.out[size_t(m0 + r) * p.N + n] = sum_avx512(acc[r]);
}

constexpr int MAX_R = 4;  // rows a block takes at once
constexpr int SPAN = 16;  // columns every block of rows goes over before the next run: their
                          // weights come from memory for the first block, from cache after

// X8: the x8 layout's blocks of eight columns (block_x8, below), else one column at a time.
template <int R, bool ONE, bool X8>
void rows_block(const Problem& p, const K6Layout& L, const uint8_t* xs, int m0, int n0, int n1);

template <bool ONE, bool X8 = false>
void columns_as(const Problem& p, const uint8_t* xs, int n0, int n1) {
  const K6Layout L(p);
  for (int a = n0; a < n1; a += SPAN) {
    const int b = std::min(n1, a + SPAN);
    int m = 0;
    for (; m + MAX_R <= p.M; m += MAX_R) rows_block<MAX_R, ONE, X8>(p, L, xs, m, a, b);
    switch (p.M - m) {
      case 1:
        rows_block<1, ONE, X8>(p, L, xs, m, a, b);
        break;
      case 2:
        rows_block<2, ONE, X8>(p, L, xs, m, a, b);
        break;
      case 3:
        rows_block<3, ONE, X8>(p, L, xs, m, a, b);
        break;
    }
  }
}

void columns(const Problem& p, const uint8_t* xs, int n0, int n1) {
  if (p.x_bytes == 1) return columns_as<true>(p, xs, n0, n1);
  columns_as<false>(p, xs, n0, n1);
}


// ---- Q6_K in the x8 layout (qmm.h's Problem::x8 with bits 6; k6.h says how it lies) ----
// Per block of eight columns and 64 values (a chunk), 384 bytes: pieces N0, N1 and T of 128
// bytes, each the eight columns' 16 bytes side by side. A column's N0 holds values i and 16 + i
// of the chunk (low nibbles, in the byte's low and high half), N1 32 + i and 48 + i, T the top
// pairs of i, 16 + i, 32 + i, 48 + i at bits 0, 2, 4, 6. So four columns' 16 codes of one
// 16-value block (one Q6_K scale each) come out of a register with a shift, a mask and one
// ternary logic op, and meet the block's activations broadcast to the four 128-bit lanes: the
// whole product is one stream of weights, as the 4-bit x8 path's (x8_vnni.cpp says why).

inline __m512i piece16(const uint8_t* x) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}

// A chunk's codes: q[s][h], block s (values 16s..16s+15) of columns 4h..4h+3.
inline void codes_x8(const uint8_t* w, __m512i (&q)[4][2]) {
  const __m512i low = _mm512_set1_epi8(0x0f), pair = _mm512_set1_epi8(0x30);
  for (int h = 0; h < 2; h++) {
    const __m512i n0 = _mm512_loadu_si512(w + 64 * h), n1 = _mm512_loadu_si512(w + 128 + 64 * h);
    const __m512i t = _mm512_loadu_si512(w + 256 + 64 * h);
    // (a & 0x0f) | (t' & 0x30): imm 0xF8 is a | (b & c)
    q[0][h] = _mm512_ternarylogic_epi32(_mm512_and_si512(n0, low), _mm512_slli_epi16(t, 4), pair, 0xF8);
    q[1][h] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(n0, 4), low), _mm512_slli_epi16(t, 2), pair, 0xF8);
    q[2][h] = _mm512_ternarylogic_epi32(_mm512_and_si512(n1, low), t, pair, 0xF8);
    q[3][h] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(n1, 4), low), _mm512_srli_epi16(t, 2), pair, 0xF8);
  }
}

constexpr size_t X8_CHUNK = 384;  // bytes of eight columns' 64 values

// R staged rows times the eight columns of block c: per 16-value block one float step per
// four columns (their scale times the row's block scale); the codes' offset of 32 returns
// once per block through the row's block sum, eight columns at a time.
template <int R, bool ONE>
void block_x8(const Problem& p, const K6Layout& L, const uint8_t* xs, int m0, int c) {
  const int chunks = p.K / 64;
  const uint8_t* w = p.w + size_t(c) * chunks * X8_CHUNK;
  const int8_t* sc = static_cast<const int8_t*>(p.scales) + size_t(c) * (p.K / K6_GROUP) * 8;
  const uint16_t* dd = static_cast<const uint16_t*>(p.biases) + size_t(c) * (p.K / K6_SUPER) * 8;
  const __m512i first4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i last4 = _mm512_add_epi32(first4, _mm512_set1_epi32(4));
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[R][2];
  __m256 bias[R];
  for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps(), bias[r] = _mm256_setzero_ps();
  __m256 d8 = _mm256_setzero_ps();
  for (int ch = 0; ch < chunks; ch++) {
    const uint8_t* wc = w + size_t(ch) * X8_CHUNK;
    for (int line = 0; line < 6; line++) __builtin_prefetch(wc + AHEAD / 4 + 64 * line, 0, 3);
    if (ch % 2 == 0) __builtin_prefetch(sc + size_t(ch + 32) * 32, 0, 3);
    if (ch % 4 == 0) d8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dd + (ch / 4) * 8)));
    __m512i q[4][2];
    codes_x8(wc, q);
    for (int s = 0; s < 4; s++) {
      const int j = ch * 4 + s;
      const __m128i s8i = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + size_t(j) * 8));
      const __m256 s8 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8i)), d8);
      const __m512 s16 = _mm512_castps256_ps512(s8);
      const __m512 scale[2] = {_mm512_permutexvar_ps(first4, s16), _mm512_permutexvar_ps(last4, s16)};
      for (int r = 0; r < R; r++) {
        const uint8_t* row = xs + L.stride * (m0 + r);
        const uint8_t* x = row + size_t(ch) * L.x_bytes + s * 16;
        const float* sums = reinterpret_cast<const float*>(row + L.sums_at);
        bias[r] = _mm256_fmadd_ps(s8, _mm256_set1_ps(sums[j]), bias[r]);
        const __m512 dx = _mm512_set1_ps(reinterpret_cast<const float*>(row + L.lanes_at)[ch * 16 + s * 4]);
        const __m512i hi = piece16(x);
        for (int h = 0; h < 2; h++) {
          __m512i sum = _mm512_dpbusd_epi32(zero, q[s][h], hi);
          if constexpr (!ONE) {
            const __m512i lo = _mm512_dpbusd_epi32(zero, q[s][h], piece16(x + 64));
            sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 7), lo);
          }
          acc[r][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(scale[h], dx), acc[r][h]);
        }
      }
    }
  }
  for (int r = 0; r < R; r++) {  // each column's four lanes, then its offset's term
    alignas(64) float lanes[32], b[8];
    _mm512_store_ps(lanes, acc[r][0]);
    _mm512_store_ps(lanes + 16, acc[r][1]);
    _mm256_store_ps(b, bias[r]);
    float* out = p.out + size_t(m0 + r) * p.N + size_t(c) * 8;
    for (int j = 0; j < 8; j++) {
      out[j] = (lanes[4 * j] + lanes[4 * j + 1]) + (lanes[4 * j + 2] + lanes[4 * j + 3]) - 32.0f * b[j];
    }
  }
}

template <int R, bool ONE, bool X8>
void rows_block(const Problem& p, const K6Layout& L, const uint8_t* xs, int m0, int n0, int n1) {
  if constexpr (X8) {
    for (int c = n0 / 8; c < n1 / 8; c++) block_x8<R, ONE>(p, L, xs, m0, c);
  } else {
    for (int n = n0; n < n1; n++) block<R, ONE>(p, L, xs, m0, n);
  }
}

void columns_x8(const Problem& p, const uint8_t* xs, int n0, int n1) {
  if (p.x_bytes == 1) return columns_as<true, true>(p, xs, n0, n1);
  columns_as<false, true>(p, xs, n0, n1);
}

}  // namespace

const DirectInt8* vnni_k6() {
  // Against the integer tiles, 6144x2048 from memory, two cores (us per product): 6 / 8 / 10
  // rows 1532 / 2134 / 2661 direct, 2482 / 2289 / 2428 tiles: up to 8 rows, as MLX's 8-bit (direct
  // 2380 / 2661 / 2678 there); one-byte activations up to 16, as theirs. Any width.
  static const DirectInt8 k{"avx512vnni", 8, 16, 0, k6_row_bytes, k6_stage, columns};
  return vnni_int8_kernels() != nullptr ? &k : nullptr;
}

const DirectInt8* vnni_k6_x8() {
  // The 4-bit x8 walk's row bounds (x8_vnni.cpp measured them over both).
  static const DirectInt8 k{"avx512vnni-x8", X8_DIRECT_ROWS, X8_DIRECT_ROWS_ONE_BYTE, 0, k6_row_bytes, k6_stage, columns_x8};
  return vnni_int8_kernels() != nullptr ? &k : nullptr;
}

}  // namespace cpu_kernels
