// Products of a mixture of experts' layer: each token's rows go through the few experts its
// router picked, so a decode step is many products of one to a few rows over different weight
// matrices. Run one by one, each would be its own hand-off to the pool (eight experts, three
// projections, forty-eight layers: over a thousand a token); here the experts that take the
// direct or float-rows path share one split over all their columns, each column computed as
// run_product computes it.
#include <vector>

#include "int8.h"
#include "panels.h"
#include "qmm.h"

namespace cpu_kernels {
namespace {

constexpr size_t ALIGN = 64;

size_t aligned(size_t bytes) {
  return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

// Bytes the part's rows take staged for its path (the direct path's layout, else floats).
size_t staged_bytes(const Problem& p, const DirectInt8* direct) {
  return direct != nullptr ? direct->row_bytes(p) * p.M : sizeof(float) * size_t(p.M) * p.K;
}

}  // namespace

void run_gathered(const Problem* ps, int count, const Kernels& kernels) {
  std::vector<StagedProduct> parts;
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
    parts.push_back({&p, direct, nullptr});
  }
  if (parts.empty()) return;
  // Every part's rows staged one after another in one buffer (the calling thread's: the
  // workers would see their own).
  thread_local std::vector<uint8_t> arena;
  std::vector<size_t> at(parts.size() + 1, 0);
  for (size_t i = 0; i < parts.size(); i++) {
    at[i + 1] = at[i] + aligned(staged_bytes(*parts[i].p, parts[i].direct));
  }
  arena.resize(at.back());
  for (size_t i = 0; i < parts.size(); i++) {
    uint8_t* to = arena.data() + at[i];
    if (parts[i].direct != nullptr) {
      parts[i].direct->stage(*parts[i].p, to);
    } else {
      prepare(*parts[i].p, kernels.lanes, reinterpret_cast<float*>(to));
    }
    parts[i].staged = to;
  }
  split_columns(parts.data(), parts.size(), kernels);
}

}  // namespace cpu_kernels
