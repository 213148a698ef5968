#include "attention.h"

#include <algorithm>
#include <cmath>
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

namespace {

// Keys per unit: all of them, unless there are too few units to share evenly between the
// threads (decode of one sequence: one unit per KV head; 9 for 40 new tokens of SmolLM2);
// then split in ranges of whole tiles, at least 8 tiles each, and their parts combined after.
int key_chunk(const Attend& a, size_t units) {
  const size_t wanted = 8 * size_t(Pool::shared()->threads());
  const int most = std::max(1, a.keys / (8 * attn::KB));
  if (units >= wanted || most == 1) return attn::round_up(std::max(a.keys, 1), attn::KB);
  const int splits = std::min(most, int((wanted + units - 1) / units));
  return attn::round_up((a.keys + splits - 1) / splits, attn::KB);
}

// out = sum over splits of o * exp(top - M) / sum of sum * exp(top - M), per row.
void combine(const Attend& a, const float* partial, int splits, float* out) {
  const int dv = a.v.dim;
  const size_t rows = size_t(a.batch) * a.q_heads * a.length, width = 2 + dv;
  for (size_t row = 0; row < rows; row++) {
    float most = attn::NEG_INF;
    for (int s = 0; s < splits; s++) most = std::max(most, partial[(s * rows + row) * width]);
    float* dst = out + row * dv;
    std::fill(dst, dst + dv, 0.0f);
    if (most == attn::NEG_INF) continue;  // every key hidden: zeros
    float total = 0.0f;
    for (int s = 0; s < splits; s++) {
      const float* part = partial + (s * rows + row) * width;
      const float weight = std::exp(part[0] - most);
      total += part[1] * weight;
      for (int d = 0; d < dv; d++) dst[d] += part[2 + d] * weight;
    }
    for (int d = 0; d < dv; d++) dst[d] /= total;
  }
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
  const size_t heads = size_t(a.batch) * a.kv_heads * blocks;
  const int chunk = key_chunk(a, heads);
  const int splits = std::max(1, (a.keys + chunk - 1) / chunk);
  std::vector<float> partial;
  if (splits > 1) partial.resize(size_t(splits) * a.batch * a.q_heads * a.length * (2 + a.v.dim));
  const size_t floats = scratch_floats(a, group * count, t.lanes);
  const size_t work = size_t(group) * count * std::min(chunk, a.keys) * (a.k.dim + a.v.dim);
  auto kernel = tiled ? t.tiled : t.dot;
  split(heads * splits, work, 1, [&](size_t u0, size_t u1) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < floats) scratch.resize(floats);
    for (size_t i = u0; i < u1; i++) {
      const int part = int(i % splits), block = int(i / splits % blocks);
      const int g = int(i / splits / blocks % a.kv_heads);
      const int b = int(i / splits / blocks / a.kv_heads);
      const int l0 = block * count;
      attn::Unit unit{b, g, l0, std::min(count, a.length - l0), part * chunk,
                      std::min(a.keys, (part + 1) * chunk)};
      if (splits > 1) {
        unit.split = part;
        unit.partial = partial.data();
      }
      kernel(a, unit, scratch.data(), out);
    }
  });
  if (splits > 1) combine(a, partial.data(), splits, out);
}

}  // namespace cpu_kernels
