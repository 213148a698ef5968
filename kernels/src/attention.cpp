#include "attention.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "attention_tiles.h"
#include "qmm.h"
#include "threads.h"

namespace cpu_kernels {

namespace {

// The attention kernels of the instruction set products use (use_isa() picks it for tests).
const attn::Table& active_table() {
#ifndef CPU_KERNELS_GENERIC_ONLY
  const char* isa = active_kernels().isa;
  if (std::strcmp(isa, "avx512") == 0) return attn::avx512_table();
  if (std::strcmp(isa, "avx2") == 0) return attn::avx2_table();
#endif
  return attn::generic_table();
}

// Floats a unit of `rows` query rows needs (either kernel's layout; attention_tiles.h).
size_t scratch_floats(const Attend& a, int rows, int lanes) {
  const size_t rp = size_t(attn::round_up(rows, lanes));
  const size_t dp = size_t(attn::round_up(a.k.dim, lanes));
  const size_t dvp = size_t(attn::round_up(a.v.dim, lanes));
  return rp * (dp + dvp + attn::KB + 4) + attn::KB * (dp + dvp) + 64;
}

}  // namespace

void attend(const Attend& a, float* out) {
  const attn::Table& t = active_table();
  const int group = a.q_heads / a.kv_heads;
  // Rows across the lanes once they fill a vector; else (decode) features across them.
  const bool tiled = group <= t.row_block && group * a.length >= t.lanes;
  int count = 1;
  if (tiled) {
    count = std::min(a.length, std::max(1, t.row_block / group));
  } else if (group * a.length < t.lanes) {
    count = a.length;
  }
  const int blocks = (a.length + count - 1) / count;
  const size_t units = size_t(a.batch) * a.kv_heads * blocks;
  const size_t floats = scratch_floats(a, group * count, t.lanes);
  const size_t work = size_t(group) * count * a.keys * (a.k.dim + a.v.dim);
  auto kernel = tiled ? t.tiled : t.dot;
  split(units, work, 1, [&](size_t u0, size_t u1) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < floats) scratch.resize(floats);
    for (size_t i = u0; i < u1; i++) {
      const int block = int(i % blocks), g = int(i / blocks % a.kv_heads);
      const int b = int(i / blocks / a.kv_heads);
      const int l0 = block * count;
      attn::Unit unit{b, g, l0, std::min(count, a.length - l0)};
      kernel(a, unit, scratch.data(), out);
    }
  });
}

}  // namespace cpu_kernels
