// The float panels path of the quantized matmul, for many rows where the integer tiles
// (int8.h) are slow: AVX2 without AVX-512 VNNI (panels_avx2.cpp says why).
#pragma once

#include "qmm.h"

namespace cpu_kernels {

struct Panels {
  const char* isa;
  // Fewest rows for which auto takes it, by bits (measured: bench/kernels.py).
  int min_rows_4bit, min_rows_8bit;
  void (*product)(const Problem& p);
};

// nullptr where this CPU lacks AVX2 with FMA and F16C.
const Panels* avx2_panels();

// The panels that go with a float instruction set: AVX2, and AVX-512 without VNNI (nullptr
// where the integer tiles do better, or on the generic set).
const Panels* panels_for(const Kernels& kernels);

// Whether this product takes the panels (nullptr: not).
const Panels* panels_choice(const Problem& p, const Kernels& kernels);

}  // namespace cpu_kernels
