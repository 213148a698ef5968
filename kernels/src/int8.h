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

// auto: the integer path from its row threshold; always / never: tests and benchmarks.
enum class Int8Mode { Auto, Always, Never };
void set_int8_mode(Int8Mode mode);
Int8Mode int8_mode();

// The integer kernels that go with a float instruction set (nullptr: none, e.g. generic).
const Int8Kernels* int8_kernels_for(const Kernels& kernels);

// Whether this product takes the integer path, and with which kernels (nullptr: float path).
const Int8Kernels* int8_choice(const Problem& p, const Kernels& kernels);

}  // namespace cpu_kernels
