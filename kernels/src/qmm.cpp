#include "qmm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "threads.h"

namespace cpu_kernels {
namespace {

bool has_avx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool has_avx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

std::atomic<const Kernels*> forced{nullptr};  // force_isa()'s choice

// Output columns per task: enough work to pay for the hand-off, and several tasks per thread
// so that a thread slowed by the scheduler does not hold up the product.
int columns_per_task(const Problem& p, int threads) {
  long weights_per_column = long(p.K) * std::max(p.M, 1);
  int min_columns = int(std::max(16L, 16384L / weights_per_column));
  int per_task = (p.N + 4 * threads - 1) / (4 * threads);
  per_task = std::max(per_task, min_columns);
  return (per_task + 15) / 16 * 16;
}

}  // namespace

bool supported(int bits, int group) {
  return (bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128);
}

void prepare(const Problem& p, int lanes, float* xk) {
  if (p.bits != 4 || lanes == 1) {
    std::memcpy(xk, p.x, sizeof(float) * size_t(p.M) * p.K);
    return;
  }
  const int chunk = 2 * lanes;
  for (int m = 0; m < p.M; m++) {
    const float* src = p.x + size_t(m) * p.K;
    float* dst = xk + size_t(m) * p.K;
    for (int c = 0; c < p.K; c += chunk) {
      for (int j = 0; j < lanes; j++) {
        dst[c + j] = src[c + 2 * j];
        dst[c + lanes + j] = src[c + 2 * j + 1];
      }
    }
  }
}

const Kernels* kernels_named(const char* isa) {
  std::string name(isa);
#ifndef CPU_KERNELS_GENERIC_ONLY
  if (name == "avx512") return has_avx512() ? &avx512_kernels() : nullptr;
  if (name == "avx2") return has_avx2() ? &avx2_kernels() : nullptr;
#endif
  if (name == "generic") return &generic_kernels();
  return nullptr;
}

const Kernels& best_kernels() {
  static const Kernels& best = [] {
    for (const char* isa : {"avx512", "avx2"}) {
      if (const Kernels* k = kernels_named(isa)) return std::cref(*k);
    }
    return std::cref(generic_kernels());
  }();
  return best;
}

const Kernels& active_kernels() {
  const Kernels* k = forced.load(std::memory_order_relaxed);
  return k ? *k : best_kernels();
}

bool force_isa(const char* isa) {
  const Kernels* k = kernels_named(isa);
  if (k != nullptr) forced.store(k);
  return k != nullptr;
}

void run_product(const Problem& p, const Kernels& kernels) {
  thread_local std::vector<float> staging;
  const float* xk = p.x;
  if (p.bits == 4 && kernels.lanes > 1) {
    staging.resize(size_t(p.M) * p.K);
    prepare(p, kernels.lanes, staging.data());
    xk = staging.data();
  }
  auto pool = Pool::shared();
  // One row at a time reads each weight once: a small layer is not worth waking workers for.
  bool small = long(p.N) * p.K < 65536;
  if (pool->threads() == 1 || small) {
    kernels.rows(p, xk, 0, p.N);
    return;
  }
  int per_task = columns_per_task(p, pool->threads());
  int tasks = (p.N + per_task - 1) / per_task;
  pool->parallel_for(tasks, [&](int t) {
    int n0 = t * per_task;
    kernels.rows(p, xk, n0, std::min(p.N, n0 + per_task));
  });
}

}  // namespace cpu_kernels
