// Quantized matrix times float activations, for MLX's affine format on x86 CPUs.
//
// out[m, n] = sum_k x[m, k] * (scale[n, k / group] * q[n, k] + bias[n, k / group])
//
// q is packed as mx.quantize packs it: each uint32 holds 32 / bits values, lowest bits
// first, so with 4 bits byte j of a row holds values 2j (low nibble) and 2j + 1 (high).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops.h"

namespace cpu_kernels {

enum class ScaleType : uint8_t { F32, F16, BF16 };

struct Problem {
  const float* x;  // [M, K] row-major
  const uint8_t* w;  // [N, K * bits / 8]
  const void* scales;  // [N, K / group], of scale_type
  const void* biases;  // [N, K / group], of scale_type
  ScaleType scale_type;
  float* out;  // [M, N] row-major
  int M, N, K, group, bits;
  // Bytes each activation is rounded to on the integer paths (int8.h): 2 (a high byte and
  // what rounding left, 15 bits) or 1 (the high byte alone, as llama.cpp's Q8 activations:
  // half the integer products). The float paths ignore it.
  int x_bytes = 2;
  // The x8 layout (x8_vnni.cpp): w holds eight columns at a time, each unit of 16 bytes of
  // the eight side by side (128 bytes), units in k order, blocks of eight one after another;
  // scales and biases eight per group alike ([N / 8][K / group][8]). N is a multiple of 8.
  // Only the direct integer path and the integer tiles read it (AVX-512 VNNI).
  bool x8 = false;
};

// One instruction set's kernels. `lanes` sets how prepare() lays x out for 4-bit rows.
struct Kernels {
  const char* isa;
  int lanes;
  // Output columns [n0, n1) of every row, reading x as prepare() left it.
  void (*rows)(const Problem&, const float* xk, int n0, int n1);
  // Attention for group units [u0, u1) (attention_impl.h): head sizes 64 and 128.
  void (*attention)(const Attention&, float* out, float* scores, size_t u0, size_t u1);
};

// x rearranged for the kernel (4-bit: even and odd positions of each 2 * lanes chunk apart,
// so that low and high nibbles meet their activations without shuffles); M * K floats.
void prepare(const Problem& p, int lanes, float* xk);

const Kernels& avx512_kernels();
const Kernels& avx2_kernels();
const Kernels& generic_kernels();

// The best set this CPU runs (AVX-512, AVX2 with FMA, or plain C++), chosen once.
const Kernels& best_kernels();
// By name ("avx512", "avx2", "generic"); nullptr when this CPU lacks it.
const Kernels* kernels_named(const char* isa);

// What products use: best_kernels() unless force_isa() chose another (tests compare them).
const Kernels& active_kernels();
bool force_isa(const char* isa);

// The formats the products take: MLX's affine 4 and 8 bits (groups 32, 64, 128), and bits 6
// with group 16, GGUF's Q6_K as k6.h lays it out (only where supports_k6: AVX-512 VNNI).
bool supported(int bits, int group);
bool supports_k6(const Kernels& kernels);
struct DirectInt8;
const DirectInt8* k6_direct_for(const Kernels& kernels, bool x8 = false);
// The direct path over the x8 layout (Problem::x8) with these kernels; nullptr: none.
const DirectInt8* x8_direct_for(const Kernels& kernels);

// Whole product, split over the pool's threads by output columns.
void run_product(const Problem& p, const Kernels& kernels);
// Several products of the same activations (x, M, K and bits alike; else one after another)
// in one split over all their columns: one hand-off to the pool instead of one each, and the
// threads share out the columns of all of them. Each column's arithmetic is run_product's.
void run_products(const Problem* ps, int count, const Kernels& kernels);
// A product whose rows are staged for its path: the direct integer path's layout
// (DirectInt8::stage), or prepare()'s floats where `direct` is nullptr.
struct DirectInt8;
struct StagedProduct {
  const Problem* p;
  const DirectInt8* direct;
  const void* staged;
};
// One split over the columns of all `parts`, side by side from multiples of 16 (every task
// holds whole blocks of 16 columns of one product: the kernels take four at a time).
void split_columns(const StagedProduct* parts, size_t count, const Kernels& kernels);
// Products over different weights of one shape (a mixture's experts: K, N, bits and group
// alike), each with its own rows (gathered.cpp). Those with few rows share one split over all
// their columns; each column's arithmetic is run_product's.
void run_gathered(const Problem* ps, int count, const Kernels& kernels);

}  // namespace cpu_kernels
