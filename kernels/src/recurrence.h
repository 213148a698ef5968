// Linear attention's and state-space layers' parts on the CPU: the gated delta rule of Qwen3.5
// and Qwen3-Next, and the short depthwise convolution before it (and before Mamba's scan,
// LFM2's gate).
#pragma once

#include <cstdint>

namespace cpu_kernels {

// The gated delta rule over T steps for B rows and Hv value heads, each head's state S
// [Dv, Dk] updated per step as mlx-lm's _gated_delta_step_ops does:
//   S = S * g;  delta = (v - S k) * beta;  S = S + delta k^T;  y = S q
// q, k [B, T, Hk, Dk] (value head h reads key head h / (Hv / Hk), as mx.repeat lays them);
// v [B, T, Hv, Dv]; g, beta [B, T, Hv]; state [B, Hv, Dv, Dk]; mask [B, T] or null (a step
// whose mask is false leaves the state as it was, its y still read from the updated one).
struct GatedDelta {
  int B, T, Hk, Hv, Dk, Dv;
  const float *q, *k, *v, *g, *beta, *state;
  const uint8_t* mask;
  float* y;  // [B, T, Hv, Dv]
  float* state_out;  // [B, Hv, Dv, Dk]
};

void gated_delta_f32(const GatedDelta& p);

// One filter of K taps per channel over x [B, L, C] zero-padded by `pad` on each side, as
// mx.conv1d(x, w, padding=pad, groups=C): out [B, L + 2 pad - K + 1, C]; w [C, K].
struct DepthwiseConv {
  int B, L, C, K, pad;
  const float *x, *w;
  float* out;
};

void depthwise_conv1d_f32(const DepthwiseConv& p);

}  // namespace cpu_kernels
