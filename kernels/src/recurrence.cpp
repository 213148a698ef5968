// The gated delta rule in one pass over each head's state per step, and the depthwise
// convolution before it. mlx-lm's CPU path runs
// it as seven MLX operations a step, each over the whole state (32 heads of 128 x 128
// floats at Qwen3.5-9B's width: 2 MB a layer), broadcasting and single-threaded, and a
// prompt of T tokens as T such steps; here a row of the state is decayed, read against k,
// updated and read against q while it is in registers, heads split over the pool.
#include "recurrence.h"

#include <cstring>
#include <vector>

#include "threads.h"
#include "vecmath.h"

namespace cpu_kernels {

namespace {

// One head of one row over every step: `S` holds its state, updated in place.
CPU_KERNELS_CLONES
void head_steps(const GatedDelta& p, int b, int h, float* S) {
  const int Dk = p.Dk, Dv = p.Dv, kh = h / (p.Hv / p.Hk);
  for (int t = 0; t < p.T; t++) {
    const size_t step = size_t(b) * p.T + t;
    const float* q = p.q + (step * p.Hk + kh) * Dk;
    const float* k = p.k + (step * p.Hk + kh) * Dk;
    const float* v = p.v + (step * p.Hv + h) * Dv;
    const float decay = p.g[step * p.Hv + h], beta = p.beta[step * p.Hv + h];
    const bool keep = p.mask == nullptr || p.mask[step] != 0;
    float* y = p.y + (step * p.Hv + h) * Dv;
    for (int j = 0; j < Dv; j++) {
      float* row = S + size_t(j) * Dk;
      float memory = 0.0f;
#pragma omp simd reduction(+ : memory)
      for (int i = 0; i < Dk; i++) memory += row[i] * decay * k[i];
      const float delta = (v[j] - memory) * beta;
      float out = 0.0f;
      if (keep) {
#pragma omp simd reduction(+ : out)
        for (int i = 0; i < Dk; i++) {
          const float s = row[i] * decay + k[i] * delta;
          row[i] = s;
          out += s * q[i];
        }
      } else {  // a padded step: its output is read, the state stays
#pragma omp simd reduction(+ : out)
        for (int i = 0; i < Dk; i++) out += (row[i] * decay + k[i] * delta) * q[i];
      }
      y[j] = out;
    }
  }
}

// Output rows [r0, r1) of the convolution (a row: one batch row's step, every channel), the
// taps laid out [K, C] so that each runs along the channels.
CPU_KERNELS_CLONES
void conv_rows(const DepthwiseConv& p, const float* taps, size_t r0, size_t r1) {
  const int out_len = p.L + 2 * p.pad - p.K + 1, C = p.C;
  for (size_t r = r0; r < r1; r++) {
    const int b = int(r / out_len), t = int(r % out_len);
    float* out = p.out + r * C;
    std::memset(out, 0, sizeof(float) * C);
    for (int k = 0; k < p.K; k++) {
      const int from = t + k - p.pad;
      if (from < 0 || from >= p.L) continue;  // the zero padding
      const float* x = p.x + (size_t(b) * p.L + from) * C;
      const float* w = taps + size_t(k) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) out[c] += x[c] * w[c];
    }
  }
}

}  // namespace

void depthwise_conv1d_f32(const DepthwiseConv& p) {
  std::vector<float> taps(size_t(p.K) * p.C);
  for (int c = 0; c < p.C; c++)
    for (int k = 0; k < p.K; k++) taps[size_t(k) * p.C + c] = p.w[size_t(c) * p.K + k];
  const size_t rows = size_t(p.B) * (p.L + 2 * p.pad - p.K + 1);
  split(rows, size_t(p.C) * p.K, 1, [&](size_t r0, size_t r1) { conv_rows(p, taps.data(), r0, r1); });
}

void gated_delta_f32(const GatedDelta& p) {
  const size_t heads = size_t(p.B) * p.Hv, state = size_t(p.Dv) * p.Dk;
  split(heads, state * (size_t(p.T) + 1), 1, [&](size_t h0, size_t h1) {
    for (size_t bh = h0; bh < h1; bh++) {
      float* S = p.state_out + bh * state;
      std::memcpy(S, p.state + bh * state, state * sizeof(float));
      head_steps(p, int(bh / p.Hv), int(bh % p.Hv), S);
    }
  });
}

}  // namespace cpu_kernels
