// The attention kernels of attention.h, written once over a vector type V (attention_avx512.cpp,
// attention_avx2.cpp, attention_generic.cpp define V and include this file).
//
// Both walk the keys in tiles of KEY_BLOCK with an online softmax (a running maximum, sum and
// output per query row, rescaled when the maximum grows), so no score matrix is ever whole.
// A tile of keys and values is made float32 once (float16 converted, 8/4-bit dequantized;
// float32 read in place) and then serves every query row of the unit.
//
// - tiled: many query rows (prompts). The unit's rows (its group's query heads times up to
//   row_block / group positions) are laid across the vector lanes: Q is transposed once, each
//   score is scale * sum_d k[j][d] * Qt[d][rows] with k[j][d] broadcast, the softmax runs over
//   keys with rows in lanes (no horizontal sums), and Ot[d][rows] += v[j][d] * P[j][rows].
//   A register block of keys (or value dims) times up to 3 row vectors: all FMAs.
// - dot: few query rows (decode): the old per-position kernel's layout, features across the
//   lanes: four keys' dot products per row at once, then rows of scores times value rows.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attention.h"

namespace cpu_kernels::attn {

constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
constexpr int KB = KEY_BLOCK;

inline int round_up(int n, int m) {
  return (n + m - 1) / m * m;
}

// ---- keys and values made float32, a tile at a time ------------------------------------

template <class V>
float param(const KVSide& s, const uint8_t* p, int i) {
  if (s.param_type == ParamType::F32) return reinterpret_cast<const float*>(p)[i];
  uint16_t h = reinterpret_cast<const uint16_t*>(p)[i];
  if (s.param_type == ParamType::F16) return V::half(h);
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Rows [j0, j0 + n) of head (b, g) as floats `width` apart (dims past s.dim zero); float32
// rows that need no padding are read where they lie. Sets `ld` to the rows' stride in floats.
template <class V>
const float* stage(const KVSide& s, int b, int g, int j0, int n, int width, float* buf,
                   int64_t& ld) {
  const uint8_t* base = s.data + b * s.strides[0] + g * s.strides[1];
  if (s.format == KVFormat::F32 && width == s.dim) {
    ld = s.strides[2] / int64_t(sizeof(float));
    return reinterpret_cast<const float*>(base + j0 * s.strides[2]);
  }
  ld = width;
  const uint8_t* scales = s.scales ? s.scales + b * s.scale_strides[0] + g * s.scale_strides[1]
                                   : nullptr;
  const uint8_t* biases = s.biases ? s.biases + b * s.bias_strides[0] + g * s.bias_strides[1]
                                   : nullptr;
  for (int j = 0; j < n; j++) {
    const uint8_t* row = base + (j0 + j) * s.strides[2];
    float* out = buf + size_t(j) * width;
    switch (s.format) {
      case KVFormat::F32:
        std::memcpy(out, row, sizeof(float) * s.dim);
        break;
      case KVFormat::F16:
        V::halves(reinterpret_cast<const uint16_t*>(row), out, s.dim);
        break;
      case KVFormat::Q8:
      case KVFormat::Q4: {
        const uint8_t* sr = scales + (j0 + j) * s.scale_strides[2];
        const uint8_t* br = biases + (j0 + j) * s.bias_strides[2];
        const int bytes = s.format == KVFormat::Q8 ? s.group : s.group / 2;
        for (int q = 0; q * s.group < s.dim; q++) {
          float scale = param<V>(s, sr, q), bias = param<V>(s, br, q);
          if (s.format == KVFormat::Q8) {
            V::dequant8(row + q * bytes, scale, bias, out + q * s.group, s.group);
          } else {
            V::dequant4(row + q * bytes, scale, bias, out + q * s.group, s.group);
          }
        }
        break;
      }
    }
    std::fill(out + s.dim, out + width, 0.0f);
  }
  return buf;
}

// ---- what every query row of a unit shares -----------------------------------------------

struct Rows {
  int group;    // query heads per key/value head
  int count;    // positions in the unit
  int shift;    // keys - length: position l sees keys up to l + shift when causal
  int kend;     // keys any row of the unit may see
  int first_hidden;  // the first key some row cannot see (causal), else kend

  Rows(const Attend& a, const Unit& u) : group(a.q_heads / a.kv_heads), count(u.count) {
    shift = a.keys - a.length;
    const bool causal = a.mask_kind == MaskKind::Causal;
    kend = std::min(u.j1, causal ? std::min(a.keys, u.l0 + u.count + shift) : a.keys);
    first_hidden = causal ? std::min(kend, u.l0 + 1 + shift) : kend;
  }
  int head(const Unit& u, int r) const { return u.g * group + r / count; }
  int position(const Unit& u, int r) const { return u.l0 + r % count; }
};

// Row r's mask (an array mask) over keys [j0, j0 + n), written at scores + j * step.
inline void apply_mask(const Attend& a, const Unit& u, const Rows& rows, int r, int j0, int n,
                       float* scores, int step) {
  const int64_t* st = a.mask_strides;
  const int64_t at = u.b * st[0] + rows.head(u, r) * st[1] + rows.position(u, r) * st[2];
  if (a.mask_kind == MaskKind::Bool) {
    const bool* m = static_cast<const bool*>(a.mask) + at;
    for (int j = 0; j < n; j++) {
      if (!m[(j0 + j) * st[3]]) scores[j * step] = NEG_INF;
    }
  } else {
    const float* m = static_cast<const float*>(a.mask) + at;
    for (int j = 0; j < n; j++) scores[j * step] += m[(j0 + j) * st[3]];
  }
}

// out[b, h, l] = o / sum for each real row (zeros where every key was hidden), or the parts
// of that to u.partial.
inline void write_rows(const Attend& a, const Unit& u, const Rows& rows, int real,
                       const float* o, int64_t row_step, int64_t dim_step, const float* top,
                       const float* sum, float* out) {
  const int dv = a.v.dim;
  const size_t all_rows = size_t(a.batch) * a.q_heads * a.length;
  for (int r = 0; r < real; r++) {
    const int h = rows.head(u, r), l = rows.position(u, r);
    const size_t row = (size_t(u.b) * a.q_heads + h) * a.length + l;
    float* dst = out + row * dv;
    float inverse = top[r] == NEG_INF ? 0.0f : 1.0f / sum[r];
    if (u.partial) {
      dst = u.partial + (u.split * all_rows + row) * (2 + dv);
      *dst++ = top[r];
      *dst++ = sum[r];
      inverse = 1.0f;
    }
    for (int d = 0; d < dv; d++) dst[d] = o[r * row_step + d * dim_step] * inverse;
  }
}

// ---- tiled: query rows across the lanes ---------------------------------------------------

// Scores of M keys (rows of k, ld apart) for NR vectors of query rows.
template <class V, int NR, int M>
inline void qk_block(const float* qt, int rp, const float* k, int64_t ld, int dim, float* st) {
  using F = typename V::F;
  constexpr int W = V::lanes;
  F acc[M][NR];
  for (int u = 0; u < M; u++)
    for (int i = 0; i < NR; i++) acc[u][i] = V::zero();
  for (int d = 0; d < dim; d++) {
    F q[NR];
    for (int i = 0; i < NR; i++) q[i] = V::load(qt + size_t(d) * rp + i * W);
    for (int u = 0; u < M; u++) {
      F kv = V::set1(k[u * ld + d]);
      for (int i = 0; i < NR; i++) acc[u][i] = V::fma(kv, q[i], acc[u][i]);
    }
  }
  for (int u = 0; u < M; u++)
    for (int i = 0; i < NR; i++) V::store(st + size_t(u) * rp + i * W, acc[u][i]);
}

// Ot[d] = c * Ot[d] + sum_j v[j][d] * P[j] for M value dims from d0.
template <class V, int NR, int M>
inline void pv_block(const float* pt, int rp, const float* v, int64_t ld, int n, float* ot,
                     const float* c) {
  using F = typename V::F;
  constexpr int W = V::lanes;
  F acc[M][NR];
  for (int i = 0; i < NR; i++) {
    F ci = V::load(c + i * W);
    for (int u = 0; u < M; u++) acc[u][i] = V::mul(V::load(ot + size_t(u) * rp + i * W), ci);
  }
  for (int j = 0; j < n; j++) {
    F p[NR];
    for (int i = 0; i < NR; i++) p[i] = V::load(pt + size_t(j) * rp + i * W);
    for (int u = 0; u < M; u++) {
      F vv = V::set1(v[j * ld + u]);
      for (int i = 0; i < NR; i++) acc[u][i] = V::fma(vv, p[i], acc[u][i]);
    }
  }
  for (int u = 0; u < M; u++)
    for (int i = 0; i < NR; i++) V::store(ot + size_t(u) * rp + i * W, acc[u][i]);
}

// Softmax numerators of a tile in place (rows in lanes); running maximum `top`, sum, and the
// factor `c` the earlier output is rescaled by.
template <class V, int NR>
inline void softmax_tile(float* st, int rp, int n, float* top, float* sum, float* c) {
  using F = typename V::F;
  constexpr int W = V::lanes;
  for (int i = 0; i < NR; i++) {
    F most = V::set1(NEG_INF);
    for (int j = 0; j < n; j++) most = V::max(most, V::load(st + size_t(j) * rp + i * W));
    F old = V::load(top + i * W);
    F fresh = V::max(old, most);
    F shift = V::max(fresh, V::set1(-FLT_MAX));  // nothing visible yet: exps of -inf, not NaN
    F total = V::zero();
    for (int j = 0; j < n; j++) {
      float* s = st + size_t(j) * rp + i * W;
      F p = V::exp(V::sub(V::load(s), shift));
      V::store(s, p);
      total = V::add(total, p);
    }
    F factor = V::exp(V::sub(old, shift));
    V::store(sum + i * W, V::fma(V::load(sum + i * W), factor, total));
    V::store(top + i * W, fresh);
    V::store(c + i * W, factor);
  }
}

template <class V, int NR>
void tiled_rows(const Attend& a, const Unit& u, float* scratch, float* out) {
  using F = typename V::F;
  constexpr int W = V::lanes, rp = NR * W;
  const Rows rows(a, u);
  const int real = rows.group * u.count, dim = a.k.dim, dv = a.v.dim;
  float* qt = scratch;
  float* ot = qt + size_t(dim) * rp;
  float* st = ot + size_t(dv) * rp;
  float* top = st + size_t(KB) * rp;
  float* sum = top + rp;
  float* c = sum + rp;
  float* limit = c + rp;
  float* kbuf = limit + rp;
  float* vbuf = kbuf + size_t(KB) * dim;
  // Queries transposed, the scale folded in; rows past `real` are zeros (lanes' padding).
  for (int r = 0; r < rp; r++) {
    const float* q = r < real ? a.q + u.b * a.q_strides[0] + rows.head(u, r) * a.q_strides[1] +
                                    rows.position(u, r) * a.q_strides[2]
                              : nullptr;
    for (int d = 0; d < dim; d++) qt[size_t(d) * rp + r] = q ? q[d] * a.scale : 0.0f;
    top[r] = NEG_INF;
    sum[r] = 0.0f;
    limit[r] = float(r < real ? rows.position(u, r) + rows.shift : a.keys);
  }
  std::fill(ot, ot + size_t(dv) * rp, 0.0f);
  const bool array_mask = a.mask_kind == MaskKind::Bool || a.mask_kind == MaskKind::Additive;
  for (int j0 = u.j0; j0 < rows.kend; j0 += KB) {
    const int n = std::min(KB, rows.kend - j0);
    int64_t ldk, ldv;
    const float* k = stage<V>(a.k, u.b, u.g, j0, n, dim, kbuf, ldk);
    const float* v = stage<V>(a.v, u.b, u.g, j0, n, dv, vbuf, ldv);
    int j = 0;
    for (; j + V::key_block <= n; j += V::key_block) {
      qk_block<V, NR, V::key_block>(qt, rp, k + j * ldk, ldk, dim, st + size_t(j) * rp);
    }
    for (; j < n; j++) qk_block<V, NR, 1>(qt, rp, k + j * ldk, ldk, dim, st + size_t(j) * rp);
    if (j0 + n > rows.first_hidden) {  // the causal diagonal crosses this tile
      for (j = std::max(0, rows.first_hidden - j0); j < n; j++) {
        F key = V::set1(float(j0 + j));
        for (int i = 0; i < NR; i++) {
          float* s = st + size_t(j) * rp + i * W;
          V::store(s, V::hide_after(V::load(s), key, V::load(limit + i * W)));
        }
      }
    }
    if (array_mask) {
      for (int r = 0; r < real; r++) apply_mask(a, u, rows, r, j0, n, st + r, rp);
    }
    softmax_tile<V, NR>(st, rp, n, top, sum, c);
    int d = 0;
    for (; d + V::dim_block <= dv; d += V::dim_block) {
      pv_block<V, NR, V::dim_block>(st, rp, v + d, ldv, n, ot + size_t(d) * rp, c);
    }
    for (; d < dv; d++) pv_block<V, NR, 1>(st, rp, v + d, ldv, n, ot + size_t(d) * rp, c);
  }
  write_rows(a, u, rows, real, ot, 1, rp, top, sum, out);
}

template <class V, int NR = 1>
void tiled_unit(const Attend& a, const Unit& u, float* scratch, float* out) {
  const int rows = a.q_heads / a.kv_heads * u.count;
  if constexpr (NR < V::row_vectors) {
    if (rows > NR * V::lanes) return tiled_unit<V, NR + 1>(a, u, scratch, out);
  }
  tiled_rows<V, NR>(a, u, scratch, out);
}

// ---- dot: features across the lanes ------------------------------------------------------

// Rows of a tile of keys or values as the dot kernel reads them, a vector of features at a
// time: load(j, d) gives features [d, d + W) of row j as floats. Float16 and quantized rows
// are converted in registers (decode reads each element once or twice: a staged float32
// copy would cost more than the arithmetic).
template <class V>
struct FloatRows {
  const float* p;
  int64_t ld;
  typename V::F load(int j, int d) const { return V::load(p + j * ld + d); }
};

template <class V>
struct HalfRows {
  const uint16_t* p;
  int64_t ld;
  typename V::F load(int j, int d) const { return V::load_half(p + j * ld + d); }
};

// params: each row's (scale, bias) per group, as floats; 2^shift values a group.
template <class V, int BITS>
struct QuantRows {
  const uint8_t* p;
  int64_t ld;
  const float* params;
  int groups, shift;
  typename V::F load(int j, int d) const {
    const float* sb = params + 2 * (j * groups + (d >> shift));
    if constexpr (BITS == 8) {
      return V::q8(p + j * ld + d, sb[0], sb[1]);
    } else {
      return V::q4(p + j * ld + d / 2, sb[0], sb[1]);
    }
  }
};

// Calls fn with the reader of rows [j0, j0 + n) of a side: in place when whole vectors
// cover a row, else stage()'s float32 copy (`width` floats a row) in buf.
template <class V, class Fn>
void with_rows(const KVSide& s, int b, int g, int j0, int n, int width, float* buf, Fn&& fn) {
  const uint8_t* base = s.data + b * s.strides[0] + g * s.strides[1] + j0 * s.strides[2];
  const bool quantized = s.format == KVFormat::Q8 || s.format == KVFormat::Q4;
  if (s.format == KVFormat::F16 && width == s.dim) {
    return fn(HalfRows<V>{reinterpret_cast<const uint16_t*>(base), s.strides[2] / 2});
  }
  if (quantized && V::lanes > 1 && width == s.dim && s.group % V::lanes == 0) {
    thread_local std::vector<float> params;
    const int groups = s.dim / s.group;
    params.resize(size_t(2) * n * groups);
    const uint8_t* sr = s.scales + b * s.scale_strides[0] + g * s.scale_strides[1];
    const uint8_t* br = s.biases + b * s.bias_strides[0] + g * s.bias_strides[1];
    for (int j = 0; j < n; j++) {
      for (int q = 0; q < groups; q++) {
        params[2 * (j * groups + q)] = param<V>(s, sr + (j0 + j) * s.scale_strides[2], q);
        params[2 * (j * groups + q) + 1] = param<V>(s, br + (j0 + j) * s.bias_strides[2], q);
      }
    }
    const int shift = __builtin_ctz(unsigned(s.group));
    if (s.format == KVFormat::Q8) {
      return fn(QuantRows<V, 8>{base, s.strides[2], params.data(), groups, shift});
    }
    return fn(QuantRows<V, 4>{base, s.strides[2], params.data(), groups, shift});
  }
  int64_t ld;
  const float* rows = stage<V>(s, b, g, j0, n, width, buf, ld);
  fn(FloatRows<V>{rows, ld});
}

// Scores of H query rows (dp floats each) against n keys, into s (rows KB apart).
template <class V, int H, class R>
void dot_scores(const float* q, int dp, const R& k, int n, float* s) {
  using F = typename V::F;
  constexpr int W = V::lanes;
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    F sums[H][4];
    for (int r = 0; r < H; r++)
      for (int x = 0; x < 4; x++) sums[r][x] = V::zero();
    for (int d = 0; d < dp; d += W) {
      F kk[4];
      for (int x = 0; x < 4; x++) kk[x] = k.load(j + x, d);
      for (int r = 0; r < H; r++) {
        F qq = V::load(q + size_t(r) * dp + d);
        for (int x = 0; x < 4; x++) sums[r][x] = V::fma(kk[x], qq, sums[r][x]);
      }
    }
    for (int r = 0; r < H; r++) V::template reduce_store<4>(sums[r], s + size_t(r) * KB + j);
  }
  for (; j < n; j++) {
    for (int r = 0; r < H; r++) {
      F total = V::zero();
      for (int d = 0; d < dp; d += W) total = V::fma(k.load(j, d), V::load(q + size_t(r) * dp + d), total);
      s[size_t(r) * KB + j] = V::reduce(total);
    }
  }
}

// o = c * o + P v for H rows and C vectors of value features from x0.
template <class V, int H, int C, class R>
void dot_values(const float* s, int n, const R& v, int x0, float* o, int dvp, const float* c) {
  using F = typename V::F;
  constexpr int W = V::lanes;
  F acc[H][C];
  for (int r = 0; r < H; r++) {
    F cr = V::set1(c[r]);
    for (int x = 0; x < C; x++) acc[r][x] = V::mul(V::load(o + size_t(r) * dvp + x * W), cr);
  }
  for (int j = 0; j < n; j++) {
    F vv[C];
    for (int x = 0; x < C; x++) vv[x] = v.load(j, x0 + x * W);
    for (int r = 0; r < H; r++) {
      F p = V::set1(s[size_t(r) * KB + j]);
      for (int x = 0; x < C; x++) acc[r][x] = V::fma(p, vv[x], acc[r][x]);
    }
  }
  for (int r = 0; r < H; r++)
    for (int x = 0; x < C; x++) V::store(o + size_t(r) * dvp + x * W, acc[r][x]);
}

// H (at most dot_rows) query rows' scores; their values in chunks of up to 4 vectors.
template <class V, class R, int H = 1>
void dot_rows(int h, const float* q, int dp, const R& k, int n, float* s) {
  if constexpr (H < V::dot_rows) {
    if (h > H) return dot_rows<V, R, H + 1>(h, q, dp, k, n, s);
  }
  dot_scores<V, H>(q, dp, k, n, s);
}

template <class V, class R, int H = 1, int C = 1>
void dot_rows_values(int h, int cv, const float* s, int n, const R& v, int x0, float* o,
                     int dvp, const float* c) {
  if constexpr (H < V::dot_rows) {
    if (h > H) return dot_rows_values<V, R, H + 1, C>(h, cv, s, n, v, x0, o, dvp, c);
  }
  if constexpr (C < 4) {
    if (cv > C) return dot_rows_values<V, R, H, C + 1>(h, cv, s, n, v, x0, o, dvp, c);
  }
  dot_values<V, H, C>(s, n, v, x0, o, dvp, c);
}

// Row r's scores (n of them, padded with -inf to whole vectors) to softmax numerators.
template <class V>
void softmax_row(float* s, int n, float& top, float& sum, float& c) {
  using F = typename V::F;
  constexpr int W = V::lanes;
  const int padded = round_up(n, W);
  std::fill(s + n, s + padded, NEG_INF);
  F most = V::set1(NEG_INF);
  for (int j = 0; j < padded; j += W) most = V::max(most, V::load(s + j));
  const float fresh = std::max(top, V::reduce_max(most));
  const F shift = V::set1(std::max(fresh, -FLT_MAX));
  F total = V::zero();
  for (int j = 0; j < padded; j += W) {
    F p = V::exp(V::sub(V::load(s + j), shift));
    V::store(s + j, p);
    total = V::add(total, p);
  }
  float factor[W];
  V::store(factor, V::exp(V::sub(V::set1(top), shift)));
  c = factor[0];
  sum = sum * c + V::reduce(total);
  top = fresh;
}

template <class V>
void dot_unit(const Attend& a, const Unit& u, float* scratch, float* out) {
  constexpr int W = V::lanes;
  const Rows rows(a, u);
  const int real = rows.group * u.count, dim = a.k.dim, dv = a.v.dim;
  const int dp = round_up(dim, W), dvp = round_up(dv, W);
  float* q = scratch;
  float* o = q + size_t(real) * dp;
  float* s = o + size_t(real) * dvp;
  float* top = s + size_t(real) * KB;
  float* sum = top + real;
  float* c = sum + real;
  float* kbuf = c + real;
  float* vbuf = kbuf + size_t(KB) * dp;
  for (int r = 0; r < real; r++) {
    const float* src = a.q + u.b * a.q_strides[0] + rows.head(u, r) * a.q_strides[1] +
                       rows.position(u, r) * a.q_strides[2];
    for (int d = 0; d < dp; d++) q[size_t(r) * dp + d] = d < dim ? src[d] * a.scale : 0.0f;
    top[r] = NEG_INF;
    sum[r] = 0.0f;
  }
  std::fill(o, o + size_t(real) * dvp, 0.0f);
  const bool array_mask = a.mask_kind == MaskKind::Bool || a.mask_kind == MaskKind::Additive;
  for (int j0 = u.j0; j0 < rows.kend; j0 += KB) {
    const int n = std::min(KB, rows.kend - j0);
    with_rows<V>(a.k, u.b, u.g, j0, n, dp, kbuf, [&](const auto& k) {
      for (int r = 0; r < real; r += V::dot_rows) {
        const int h = std::min(V::dot_rows, real - r);
        dot_rows<V>(h, q + size_t(r) * dp, dp, k, n, s + size_t(r) * KB);
      }
    });
    for (int r = 0; r < real; r++) {
      float* row = s + size_t(r) * KB;
      if (a.mask_kind == MaskKind::Causal) {
        const int last = rows.position(u, r) + rows.shift;  // the last key it sees
        for (int j = std::max(0, last + 1 - j0); j < n; j++) row[j] = NEG_INF;
      }
      if (array_mask) apply_mask(a, u, rows, r, j0, n, row, 1);
      softmax_row<V>(row, n, top[r], sum[r], c[r]);
    }
    with_rows<V>(a.v, u.b, u.g, j0, n, dvp, vbuf, [&](const auto& v) {
      for (int r = 0; r < real; r += V::dot_rows) {
        const int h = std::min(V::dot_rows, real - r);
        for (int x = 0; x < dvp; x += 4 * W) {
          dot_rows_values<V>(h, std::min(4, (dvp - x) / W), s + size_t(r) * KB, n, v, x,
                             o + size_t(r) * dvp + x, dvp, c + r);
        }
      }
    });
  }
  write_rows(a, u, rows, real, o, dvp, 1, top, sum, out);
}

template <class V>
Table table(const char* isa) {
  return Table{isa, V::lanes, V::row_vectors * V::lanes, tiled_unit<V>, dot_unit<V>};
}

}  // namespace cpu_kernels::attn
