// Plain C++ (any CPU): the same kernel with one float per "vector"; correct, not fast.
#include "attention_impl.h"
#include "rows_impl.h"

namespace cpu_kernels {
namespace {

struct Scalar {
  using F = float;
  using I = uint32_t;
  static constexpr int lanes = 1;
  static constexpr int max_rows = 4;
  static constexpr int accumulators = 8;

  static F zero() { return 0.0f; }
  static F set1(float v) { return v; }
  static F load(const float* p) { return *p; }
  static F add(F a, F b) { return a + b; }
  static void store(float* p, F v) { *p = v; }
  static F mul(F a, F b) { return a * b; }
  static F fma(F a, F b, F c) { return a * b + c; }
  static float reduce(F a) { return a; }
  template <int C>
  static void reduce_store(const F* v, float* out) {
    for (int i = 0; i < C; i++) out[i] = v[i];
  }
  static I widen_bytes(const uint8_t* p) { return *p; }
  static I low_nibbles(I v) { return v & 15u; }
  static I high_nibbles(I v) { return v >> 4; }
  static F to_float(I v) { return static_cast<float>(v); }
  // Low and high nibbles of `lanes` bytes as scale * q + bias.
  static void dequantize_nibbles(const uint8_t* p, F scale, F bias, F& lo, F& hi) {
    I packed = widen_bytes(p);
    lo = fma(to_float(low_nibbles(packed)), scale, bias);
    hi = fma(to_float(high_nibbles(packed)), scale, bias);
  }
  static void halves_to_floats(const uint16_t* in, float* out, int n) {
    for (int i = 0; i < n; i++) out[i] = detail::half_to_float(in[i]);
  }
  static void bf16s_to_floats(const uint16_t* in, float* out, int n) {
    for (int i = 0; i < n; i++) out[i] = detail::bf16_to_float(in[i]);
  }
};

}  // namespace

const Kernels& generic_kernels() {
  static const Kernels k{"generic", Scalar::lanes, detail::rows_any<Scalar>, detail::attention_any<Scalar>};
  return k;
}

}  // namespace cpu_kernels
