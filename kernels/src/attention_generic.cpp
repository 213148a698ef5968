// The attention kernels (attention_tiles.h) in plain C++ (any CPU): one float per "vector";
// correct, not fast.
#include "attention_tiles.h"
#include "vecmath.h"

namespace cpu_kernels::attn {
namespace {

struct Scalar {
  using F = float;
  static constexpr int lanes = 1;
  static constexpr int row_vectors = 8;
  static constexpr int key_block = 4;
  static constexpr int dim_block = 4;
  static constexpr int dot_rows = 4;

  static F zero() { return 0.0f; }
  static F set1(float v) { return v; }
  static F load(const float* p) { return *p; }
  static void store(float* p, F v) { *p = v; }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F fma(F a, F b, F c) { return a * b + c; }
  static F max(F a, F b) { return a > b ? a : b; }
  static float reduce(F a) { return a; }
  static float reduce_max(F a) { return a; }
  template <int C>
  static void reduce_store(const F* v, float* out) {
    for (int i = 0; i < C; i++) out[i] = v[i];
  }
  static F exp(F x) { return exp_nonpositive(x); }
  static F hide_after(F s, F key, F limit) { return key > limit ? NEG_INF : s; }
  static float half(uint16_t h) {
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
    if (e == 0) {
      if (mant == 0) {
        bits = sign;
      } else {  // subnormal: normalise
        e = 113;
        while (!(mant & 0x400u)) {
          mant <<= 1;
          --e;
        }
        bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
      }
    } else if (e == 31) {
      bits = sign | 0x7f800000u | (mant << 13);
    } else {
      bits = sign | ((e + 112) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  // Unused (with_rows stages quantized rows for one lane: a nibble's parity is lost in p).
  static F q8(const uint8_t* p, float scale, float bias) { return scale * float(*p) + bias; }
  static F q4(const uint8_t* p, float scale, float bias) { return scale * float(*p & 15) + bias; }
  static F load_half(const uint16_t* p) { return half(*p); }
  static void halves(const uint16_t* in, float* out, int n) {
    for (int i = 0; i < n; i++) out[i] = half(in[i]);
  }
  static void dequant8(const uint8_t* p, float scale, float bias, float* out, int n) {
    for (int i = 0; i < n; i++) out[i] = scale * float(p[i]) + bias;
  }
  static void dequant4(const uint8_t* p, float scale, float bias, float* out, int n) {
    for (int i = 0; i < n; i++) out[i] = scale * float((p[i / 2] >> (4 * (i % 2))) & 15) + bias;
  }
};

}  // namespace

const Table& generic_table() {
  static const Table t = table<Scalar>("generic");
  return t;
}

}  // namespace cpu_kernels::attn
