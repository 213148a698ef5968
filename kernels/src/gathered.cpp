// Products of a mixture of experts' layer: each token's rows go through the few experts its
// router picked, so a decode step is many products of one to a few rows over different weight
// matrices. Run one by one, each would be its own hand-off to the pool (eight experts, three
// projections, forty-eight layers: over a thousand a token); here the experts that take the
// direct or float-rows path share one split over all their columns, each column computed as
// run_product computes it.
#include <algorithm>
#include <cstring>
#include <vector>

#include "int8.h"
#include "panels.h"
#include "qmm.h"
#include "threads.h"

namespace cpu_kernels {
namespace {

constexpr size_t ALIGN = 64;

size_t aligned(size_t bytes) {
  return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

// One product of the shared split: its path and where its staged rows lie in the arena.
struct Part {
  const Problem* p;
  const DirectInt8* direct;  // nullptr: the float rows
  size_t at;  // the staged rows' offset in the arena
};

// The part's rows as its path reads them, copied into the arena at `at` (the paths' own
// staging buffers are the calling thread's, overwritten by the next product's).
size_t stage_into(const Part& part, const Kernels& kernels, std::vector<uint8_t>& arena) {
  const Problem& p = *part.p;
  const uint8_t* from = nullptr;
  size_t bytes = 0;
  if (part.direct != nullptr) {
    from = part.direct->stage(p);
    bytes = part.direct->row_bytes(p) * p.M;
  } else {
    bytes = sizeof(float) * size_t(p.M) * p.K;
  }
  arena.resize(part.at + aligned(bytes));
  uint8_t* to = arena.data() + part.at;
  if (from != nullptr) {
    std::memcpy(to, from, bytes);
  } else {
    prepare(p, kernels.lanes, reinterpret_cast<float*>(to));
  }
  return part.at + aligned(bytes);
}

}  // namespace

void run_gathered(const Problem* ps, int count, const Kernels& kernels) {
  std::vector<Part> parts;
  for (int i = 0; i < count; i++) {
    const Problem& p = ps[i];
    if (p.M <= 0 || p.N <= 0) continue;
    // The direct path up to its row bound at any width. (A dense layer's short rows take the
    // float path on AVX2, whose steps measured faster there; an expert's 768 features read
    // 1.5x faster direct: 0.49 against 0.74 ms for eight experts' 2048x768 down projections,
    // 4-bit.) The bound is on the rows auto decides by: under use_int8_rows(n) (a speculative
    // verification of n rows) every expert takes the path of a plain step of n rows, whose
    // experts hold at most n rows each.
    const DirectInt8* direct = direct_choice(p, kernels, true);
    if (direct == nullptr && (panels_choice(p, kernels) || int8_choice(p, kernels))) {
      run_product(p, kernels);  // many rows: a split of its own pays for itself
      continue;
    }
    parts.push_back({&p, direct, 0});
  }
  if (parts.empty()) return;
  thread_local std::vector<uint8_t> arena;
  arena.clear();
  size_t end = 0;
  int rows = 0;
  for (Part& part : parts) {
    part.at = end;
    end = stage_into(part, kernels, arena);
    rows = std::max(rows, part.p->M);
  }
  // Pointers taken after the arena stopped growing.
  const uint8_t* base = arena.data();
  std::vector<size_t> starts(parts.size() + 1, 0);
  for (size_t i = 0; i < parts.size(); i++) {
    starts[i + 1] = starts[i] + (size_t(parts[i].p->N) + 15) / 16 * 16;
  }
  split(starts.back(), size_t(ps[0].K) * rows, 16, [&](size_t c0, size_t c1) {
    // The parts whose columns meet [c0, c1): from the last start at or before c0.
    size_t i = std::upper_bound(starts.begin(), starts.end(), c0) - starts.begin() - 1;
    for (; i < parts.size() && starts[i] < c1; i++) {
      const Problem& p = *parts[i].p;
      const size_t lo = starts[i], hi = lo + size_t(p.N);
      if (c0 >= hi) continue;
      const int n0 = int(std::max(c0, lo) - lo), n1 = int(std::min(c1, hi) - lo);
      const uint8_t* staged = base + parts[i].at;
      if (parts[i].direct != nullptr) {
        parts[i].direct->columns(p, staged, n0, n1);
      } else {
        kernels.rows(p, reinterpret_cast<const float*>(staged), n0, n1);
      }
    }
  });
}

}  // namespace cpu_kernels
