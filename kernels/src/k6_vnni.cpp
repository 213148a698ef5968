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

template <int R, bool ONE>
void rows_block(const Problem& p, const K6Layout& L, const uint8_t* xs, int m0, int n0, int n1) {
  for (int n = n0; n < n1; n++) block<R, ONE>(p, L, xs, m0, n);
}

template <bool ONE>
void columns_as(const Problem& p, const uint8_t* xs, int n0, int n1) {
  const K6Layout L(p);
  for (int a = n0; a < n1; a += SPAN) {
    const int b = std::min(n1, a + SPAN);
    int m = 0;
    for (; m + MAX_R <= p.M; m += MAX_R) rows_block<MAX_R, ONE>(p, L, xs, m, a, b);
    switch (p.M - m) {
      case 1:
        rows_block<1, ONE>(p, L, xs, m, a, b);
        break;
      case 2:
        rows_block<2, ONE>(p, L, xs, m, a, b);
        break;
      case 3:
        rows_block<3, ONE>(p, L, xs, m, a, b);
        break;
    }
  }
}

void columns(const Problem& p, const uint8_t* xs, int n0, int n1) {
  if (p.x_bytes == 1) return columns_as<true>(p, xs, n0, n1);
  columns_as<false>(p, xs, n0, n1);
}


}  // namespace

const DirectInt8* vnni_k6() {
  // Against the integer tiles, 6144x2048 from memory, two cores (us per product): 6 / 8 / 10
  // rows 1532 / 2134 / 2661 direct, 2482 / 2289 / 2428 tiles: up to 8 rows, as MLX's 8-bit (direct
  // 2380 / 2661 / 2678 there); one-byte activations up to 16, as theirs. Any width.
  static const DirectInt8 k{"avx512vnni", 8, 16, 0, k6_row_bytes, k6_stage, columns};
  return vnni_int8_kernels() != nullptr ? &k : nullptr;
}

}  // namespace cpu_kernels
