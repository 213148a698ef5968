// Plain loops the compiler vectorizes, built once per instruction set and chosen at load time.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// GCC and Clang on x86-64 Linux clone a function for AVX-512, AVX2 and the baseline and pick
// one when the module loads (an ifunc); elsewhere it is built once for the target.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define CPU_KERNELS_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_KERNELS_CLONES
#endif

namespace cpu_kernels {

// exp(x) for x <= 0 to float precision (relative error ~2e-7), in operations that vectorize:
// x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-6 polynomial, 2^n through the exponent.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  float n = std::floor(x * 1.44269504f + 0.5f);
  float r = x - n * 0.693145752f;  // ln 2, split so n * hi is exact
  r = r - n * 1.42860677e-06f;
  float p = 1.3888889e-3f;
  p = p * r + 8.3333333e-3f;
  p = p * r + 4.1666667e-2f;
  p = p * r + 1.6666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace cpu_kernels
