// The integer path of the quantized matmul, for many rows (prompt reading): activations
// quantized per row in blocks of the weight's group (int8 values, a scale, and the block's sum
// for the affine bias), weights unpacked to bytes in tiles of 16 columns, and integer dot
// products (AVX-512 VNNI vpdpbusd, or AVX2 vpmaddubsw) with one float step per group:
//
//   x . w over a group = s_w * d_x * sum(x8 * q) + b_w * d_x * sum(x8)
//
// so the result is the exact product of the weights with x rounded to 8 bits per block, as
// llama.cpp's Q8 activations give (not bit-equal to the float path).
#pragma once

#include "qmm.h"

namespace cpu_kernels {

struct Int8Kernels {
  const char* isa;
  void (*product)(const Problem& p);
  // Fewest rows for which this path beats the float one, by bits (measured: bench/kernels.py).
  int min_rows_4bit, min_rows_8bit;
};

// nullptr where this CPU lacks the instructions.
const Int8Kernels* vnni_int8_kernels();
const Int8Kernels* avx2_int8_kernels();

// The integer path for few rows (int8_direct.cpp): the same rounding of the activations,
// staged once per call, and the weights read as MLX packs them (no unpacked tiles, which cost
// more than they save at one row). Any number of rows; auto uses it up to max_rows, or
// max_rows_one_byte where the activations take one byte (half the integer work a row).
struct DirectInt8 {
  const char* isa;
  int max_rows, max_rows_one_byte;
  // Fewest input features for which auto takes it (short rows: the float path measured
  // faster on AVX2, each column's fixed costs spread over fewer chunks).
  int min_features;
  // Bytes between two of stage()'s rows.
  size_t (*row_bytes)(const Problem& p);
  // x's rows, rounded and laid out for columns(), written at `out` (row_bytes(p) * M bytes).
  void (*stage)(const Problem& p, uint8_t* out);
  // Output columns [n0, n1) of every row, from what stage() left.
  void (*columns)(const Problem& p, const uint8_t* staged, int n0, int n1);
};

// nullptr where this CPU lacks AVX-512 VNNI (vnni) or AVX2 (avx2: int8_direct_avx2.cpp).
const DirectInt8* vnni_direct_int8();
const DirectInt8* avx2_direct_int8();

// The direct path over the x8 layout (Problem::x8, x8_vnni.cpp), nullptr where this CPU lacks
// AVX-512 VNNI.
const DirectInt8* vnni_direct_x8();

// The direct path for Q6_K's weights (bits 6, k6.h, k6_vnni.cpp), nullptr where this CPU
// lacks AVX-512 VNNI.
const DirectInt8* vnni_k6();
// The same over Q6_K in the x8 layout (Problem::x8 with bits 6).
const DirectInt8* vnni_k6_x8();

// The rows up to which auto takes the direct paths over the x8 layout (x8_vnni.cpp says why),
// with two-byte and with one-byte activations.
constexpr int X8_DIRECT_ROWS = 24, X8_DIRECT_ROWS_ONE_BYTE = 32;

// The direct path that goes with a float instruction set (nullptr: none, e.g. generic).
const DirectInt8* direct_kernels_for(const Kernels& kernels);

// auto: the direct path up to its row bound, the float panels (panels.h) or the tiled one
// from their threshold, else floats; always (tiles) / direct / panels / never (floats): tests
// and benchmarks.
enum class Int8Mode { Auto, Always, Direct, Panels, Never };
void set_int8_mode(Int8Mode mode);
Int8Mode int8_mode();
// auto chooses as for a product of `rows` rows whatever its own count (0: its own count). A
// speculative verification of n rows, each with its draft, then computes every row as the
// plain step of n rows does: each path gives a row the same result in any batch.
void set_int8_rows(int rows);

// The integer kernels that go with a float instruction set (nullptr: none, e.g. generic).
const Int8Kernels* int8_kernels_for(const Kernels& kernels);

// Whether this product takes the tiled integer path, and with which kernels (nullptr: not).
const Int8Kernels* int8_choice(const Problem& p, const Kernels& kernels);
// Whether it takes the direct integer path (nullptr: not); `any_width`: whatever its input
// features (a mixture's experts: gathered.cpp says why).
const DirectInt8* direct_choice(const Problem& p, const Kernels& kernels, bool any_width = false);

}  // namespace cpu_kernels
