// The row kernel, written once over a vector type V and compiled once per instruction set
// (rows_avx512.cpp, rows_avx2.cpp define V and include this file).
//
// For each output column n the weights of one group are unpacked to floats once and
// dequantized (scale * q + bias), then multiplied with R activation rows at a time: the
// unpacking is shared by R rows, so batches cost little more than one row in weight traffic.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "qmm.h"

namespace cpu_kernels::detail {

inline float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 113;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline void prefetch(const char* address) {
  __builtin_prefetch(address, 0, 3);
}

// The scales or biases of `count` consecutive output columns from n as float32 (they lie
// one after another in memory), so the hot loop broadcasts them straight from memory.
template <class V>
const float* column_params(const Problem& p, const void* base, int n, int count, float* buffer) {
  int values = count * (p.K / p.group);
  size_t offset = size_t(n) * (p.K / p.group);
  switch (p.scale_type) {
    case ScaleType::F32:
      return static_cast<const float*>(base) + offset;
    case ScaleType::F16:
      V::halves_to_floats(static_cast<const uint16_t*>(base) + offset, buffer, values);
      return buffer;
    case ScaleType::BF16:
      V::bf16s_to_floats(static_cast<const uint16_t*>(base) + offset, buffer, values);
      return buffer;
  }
  return buffer;
}

// R activation rows from m0 times C output columns from n.
//
// A chunk of weights (4-bit: 2 * lanes values, low and high nibbles apart; 8-bit: lanes
// values) is unpacked once per column and meets the R rows' activations there; each
// (row, column) sums into its own vector(s), reduced to one float at the end. Several columns
// at once share the activation loads and the final reductions, and give a single row enough
// independent FMA chains to hide their latency.
template <class V, int BITS, int GROUP, int R, int C>
inline void block(const Problem& p, const float* xk, int n, int m0, const float* s,
                  const float* b) {
  using F = typename V::F;
  constexpr int W = V::lanes;
  constexpr int HALVES = BITS == 4 ? 2 : 1;
  constexpr int CHUNK = HALVES * W;  // values one unpacked load covers
  const int K = p.K;
  const int groups = K / GROUP;
  const size_t row_bytes = size_t(K) * BITS / 8;
  const uint8_t* w = p.w + size_t(n) * row_bytes;
  const float* xrow = xk + size_t(m0) * K;
  F acc[C][HALVES][R];
  for (int c = 0; c < C; c++)
    for (int h = 0; h < HALVES; h++)
      for (int r = 0; r < R; r++) acc[c][h][r] = V::zero();

  for (int k = 0; k < K; k += CHUNK) {
    const int g = k / GROUP;
    for (int c = 0; c < C; c++) {
      F scale = V::set1(s[c * groups + g]);
      F bias = V::set1(b[c * groups + g]);
      const uint8_t* wc = w + c * row_bytes;
      if constexpr (BITS == 4) {
        F lo, hi;
        V::dequantize_nibbles(wc + k / 2, scale, bias, lo, hi);
        for (int r = 0; r < R; r++) {
          const float* xr = xrow + size_t(r) * K + k;
          acc[c][0][r] = V::fma(lo, V::load(xr), acc[c][0][r]);
          acc[c][1][r] = V::fma(hi, V::load(xr + W), acc[c][1][r]);
        }
      } else {  // 8 bits: one byte per value, in order
        F wv = V::fma(V::to_float(V::widen_bytes(wc + k)), scale, bias);
        for (int r = 0; r < R; r++) {
          acc[c][0][r] = V::fma(wv, V::load(xrow + size_t(r) * K + k), acc[c][0][r]);
        }
      }
    }
  }
  for (int r = 0; r < R; r++) {
    F sums[C];
    for (int c = 0; c < C; c++) {
      sums[c] = acc[c][0][r];
      for (int h = 1; h < HALVES; h++) sums[c] = V::add(sums[c], acc[c][h][r]);
    }
    V::template reduce_store<C>(sums, p.out + size_t(m0 + r) * p.N + n);
  }
}

// Columns a pass takes at once: many for few rows (a lone row needs independent chains),
// one for many rows (their accumulators fill the registers).
template <class V, int BITS, int R>
constexpr int columns_at_once() {
  constexpr int halves = BITS == 4 ? 2 : 1;
  constexpr int budget = V::accumulators / (halves * R);
  return budget >= 4 ? 4 : (budget >= 2 ? 2 : 1);
}

template <class V, int BITS, int GROUP, int R>
void columns(const Problem& p, const float* xk, int n0, int n1, int m0, float* sb, float* bb) {
  constexpr int C = columns_at_once<V, BITS, R>();
  const size_t row_bytes = size_t(p.K) * BITS / 8;
  const size_t param_bytes = size_t(p.K / p.group) * (p.scale_type == ScaleType::F32 ? 4 : 2);
  int n = n0;
  for (; n + C <= n1; n += C) {
    // Weights stream from memory once per product: ask for the block after next now, so
    // the loads overlap the arithmetic instead of following it.
    if (n + 3 * C <= n1) {
      const char* next = reinterpret_cast<const char*>(p.w + size_t(n + 2 * C) * row_bytes);
      for (size_t at = 0; at < C * row_bytes; at += 64) prefetch(next + at);
      const char* ns = static_cast<const char*>(p.scales) + size_t(n + 2 * C) * param_bytes;
      const char* nb = static_cast<const char*>(p.biases) + size_t(n + 2 * C) * param_bytes;
      for (size_t at = 0; at < C * param_bytes; at += 64) {
        prefetch(ns + at);
        prefetch(nb + at);
      }
    }
    const float* s = column_params<V>(p, p.scales, n, C, sb);
    const float* b = column_params<V>(p, p.biases, n, C, bb);
    block<V, BITS, GROUP, R, C>(p, xk, n, m0, s, b);
  }
  for (; n < n1; n++) {
    const float* s = column_params<V>(p, p.scales, n, 1, sb);
    const float* b = column_params<V>(p, p.biases, n, 1, bb);
    block<V, BITS, GROUP, R, 1>(p, xk, n, m0, s, b);
  }
}

// Calls columns<..., R> for a run-time R below max_rows.
template <class V, int BITS, int GROUP, int R = 1>
void dispatch_rows(int left, const Problem& p, const float* xk, int n0, int n1, int m0,
                   float* sb, float* bb) {
  if constexpr (R < V::max_rows) {
    if (left == R) return columns<V, BITS, GROUP, R>(p, xk, n0, n1, m0, sb, bb);
    dispatch_rows<V, BITS, GROUP, R + 1>(left, p, xk, n0, n1, m0, sb, bb);
  }
}

// Rows of x in blocks of V::max_rows, then the remainder, each block over [n0, n1).
template <class V, int BITS, int GROUP>
void rows(const Problem& p, const float* xk, int n0, int n1) {
  thread_local std::vector<float> buffer;
  size_t values = size_t(4) * (p.K / p.group);  // four columns' worth
  if (buffer.size() < 2 * values) buffer.resize(2 * values);
  float* sb = buffer.data();
  float* bb = sb + values;
  constexpr int RM = V::max_rows;
  // Columns in tiles, so a tile's weights stay in cache while every row block reads them.
  constexpr int TILE = 64;
  for (int t0 = n0; t0 < n1; t0 += TILE) {
    int t1 = std::min(n1, t0 + TILE);
    int m0 = 0;
    for (; m0 + RM <= p.M; m0 += RM) columns<V, BITS, GROUP, RM>(p, xk, t0, t1, m0, sb, bb);
    dispatch_rows<V, BITS, GROUP>(p.M - m0, p, xk, t0, t1, m0, sb, bb);
  }
}

template <class V>
void rows_any(const Problem& p, const float* xk, int n0, int n1) {
  if (p.bits == 4 && p.group == 32) return rows<V, 4, 32>(p, xk, n0, n1);
  if (p.bits == 4 && p.group == 64) return rows<V, 4, 64>(p, xk, n0, n1);
  if (p.bits == 4 && p.group == 128) return rows<V, 4, 128>(p, xk, n0, n1);
  if (p.bits == 8 && p.group == 32) return rows<V, 8, 32>(p, xk, n0, n1);
  if (p.bits == 8 && p.group == 64) return rows<V, 8, 64>(p, xk, n0, n1);
  if (p.bits == 8 && p.group == 128) return rows<V, 8, 128>(p, xk, n0, n1);
}

}  // namespace cpu_kernels::detail
