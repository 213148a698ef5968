// Attention for one key/value head and one query position, all the query heads that share it
// at once (grouped-query attention: they read each key and value once), written once over a
// vector type V like rows_impl.h and compiled per instruction set.
//
// Scores: four keys at a time, each key's D values loaded once and dotted with every query
// head, the four sums per head reduced together. Values: each value row loaded once and
// accumulated into every head's output, kept in registers across all keys.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops.h"
#include "vecmath.h"

namespace cpu_kernels::detail {

struct Group {
  int b, g, l;  // batch row, key/value head, query position
  int visible;  // keys it may see (fewer than a.keys when causal)
};

template <class V, int DV, int H>
void scores_block(const Attention& a, const Group& at, int h0, float* scores) {
  using F = typename V::F;
  constexpr int W = V::lanes;
  const float* k = a.k + at.b * a.k_strides[0] + at.g * a.k_strides[1];
  const int64_t step = a.k_strides[2];
  const float* q[H];
  for (int r = 0; r < H; r++) {
    q[r] = a.q + at.b * a.q_strides[0] + (h0 + r) * a.q_strides[1] + at.l * a.q_strides[2];
  }
  int j = 0;
  for (; j + 4 <= at.visible; j += 4) {
    const float* kj = k + j * step;
    for (int r = 0; r < H; r++) {
      F sums[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
      for (int d = 0; d < DV; d++) {
        F qd = V::load(q[r] + d * W);
        for (int u = 0; u < 4; u++) sums[u] = V::fma(V::load(kj + u * step + d * W), qd, sums[u]);
      }
      V::template reduce_store<4>(sums, scores + size_t(r) * a.keys + j);
    }
  }
  for (; j < at.visible; j++) {
    for (int r = 0; r < H; r++) {
      F sum = V::zero();
      for (int d = 0; d < DV; d++) sum = V::fma(V::load(k + j * step + d * W), V::load(q[r] + d * W), sum);
      scores[size_t(r) * a.keys + j] = V::reduce(sum);
    }
  }
}

inline float mask_at(const Attention& a, const Group& at, int h, int j) {
  const int64_t* st = a.mask_strides;
  int64_t where = at.b * st[0] + h * st[1] + at.l * st[2] + j * st[3];
  if (a.mask_kind == MaskKind::Bool) {
    return static_cast<const bool*>(a.mask)[where] ? 0.0f
                                                   : -std::numeric_limits<float>::infinity();
  }
  return static_cast<const float*>(a.mask)[where];
}

// Scale, mask, softmax numerators in place; returns 1 / their sum (0 when nothing is visible).
inline float softmax_row(const Attention& a, const Group& at, int h, float* s) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const bool masked = a.mask_kind == MaskKind::Bool || a.mask_kind == MaskKind::Additive;
  float top = neg_inf;
  for (int j = 0; j < at.visible; j++) {
    float score = s[j] * a.scale + (masked ? mask_at(a, at, h, j) : 0.0f);
    s[j] = score;
    top = std::max(top, score);
  }
  if (top == neg_inf) {  // every key hidden: zeros, not NaN
    std::fill(s, s + at.visible, 0.0f);
    return 0.0f;
  }
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int j = 0; j < at.visible; j++) {
    float e = exp_nonpositive(s[j] - top);
    s[j] = e;
    total += e;
  }
  return 1.0f / total;
}

template <class V, int DV, int H>
void values_block(const Attention& a, const Group& at, int h0, const float* scores,
                  const float* inverse, float* out) {
  using F = typename V::F;
  constexpr int W = V::lanes;
  const float* v = a.v + at.b * a.v_strides[0] + at.g * a.v_strides[1];
  F acc[H][DV];
  for (int r = 0; r < H; r++)
    for (int d = 0; d < DV; d++) acc[r][d] = V::zero();
  for (int j = 0; j < at.visible; j++) {
    const float* row = v + j * a.v_strides[2];
    for (int r = 0; r < H; r++) {
      F p = V::set1(scores[size_t(r) * a.keys + j]);
      for (int d = 0; d < DV; d++) acc[r][d] = V::fma(p, V::load(row + d * W), acc[r][d]);
    }
  }
  for (int r = 0; r < H; r++) {
    float* o = out + (size_t(at.b * a.q_heads + h0 + r) * a.length + at.l) * a.value_dim;
    F scale = V::set1(inverse[r]);
    for (int d = 0; d < DV; d++) V::store(o + d * W, V::mul(acc[r][d], scale));
  }
}

// H query heads from h0 (H fixed, so their accumulators stay in registers).
template <class V, int DV, int H>
void heads(const Attention& a, const Group& at, int h0, float* scores, float* out) {
  scores_block<V, DV, H>(a, at, h0, scores);
  float inverse[H];
  for (int r = 0; r < H; r++) inverse[r] = softmax_row(a, at, h0 + r, scores + size_t(r) * a.keys);
  values_block<V, DV, H>(a, at, h0, scores, inverse, out);
}

template <class V, int DV, int H = 1>
void heads_left(int left, const Attention& a, const Group& at, int h0, float* scores, float* out) {
  if constexpr (H < 8) {
    if (left == H) return heads<V, DV, H>(a, at, h0, scores, out);
    heads_left<V, DV, H + 1>(left, a, at, h0, scores, out);
  }
}

// Every query head of group units [u0, u1) (a unit: batch row, key/value head, position);
// `scores` holds a group's worth of rows (q_heads / kv_heads * keys floats).
template <class V, int DV>
void attention_units(const Attention& a, float* out, float* scores, size_t u0, size_t u1) {
  // Heads at once: their outputs (DV vectors each) fill the registers, at most four.
  constexpr int H = std::clamp(V::accumulators / DV, 1, 4);
  const int per_group = a.q_heads / a.kv_heads;
  for (size_t u = u0; u < u1; u++) {
    Group at{int(u / a.length / a.kv_heads), int(u / a.length % a.kv_heads), int(u % a.length),
             a.keys};
    if (a.mask_kind == MaskKind::Causal) {
      at.visible = std::min(a.keys, at.l + a.keys - a.length + 1);
    }
    int h = at.g * per_group, end = h + per_group;
    for (; h + H <= end; h += H) heads<V, DV, H>(a, at, h, scores, out);
    if (h < end) heads_left<V, DV>(end - h, a, at, h, scores, out);
  }
}

// The entry the per-instruction-set Kernels point to: head sizes of 64 and 128 floats, keys
// and values of one size (attention_f32 sends nothing else).
template <class V>
void attention_any(const Attention& a, float* out, float* scores, size_t u0, size_t u1) {
  if (a.dim == 64) return attention_units<V, 64 / V::lanes>(a, out, scores, u0, u1);
  attention_units<V, 128 / V::lanes>(a, out, scores, u0, u1);
}

}  // namespace cpu_kernels::detail
