#include "qmm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "int8.h"
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
std::atomic<Int8Mode> int8_setting{Int8Mode::Auto};

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

void set_int8_mode(Int8Mode mode) {
  int8_setting.store(mode);
}

Int8Mode int8_mode() {
  return int8_setting.load(std::memory_order_relaxed);
}

const Int8Kernels* int8_kernels_for(const Kernels& kernels) {
#ifndef CPU_KERNELS_GENERIC_ONLY
  const std::string isa(kernels.isa);
  if (isa == "avx512") {
    // AVX-512 without VNNI (Skylake-X) still has AVX2's vpmaddubsw.
    const Int8Kernels* vnni = vnni_int8_kernels();
    return vnni != nullptr ? vnni : avx2_int8_kernels();
  }
  if (isa == "avx2") return avx2_int8_kernels();
#else
  (void)kernels;
#endif
  return nullptr;
}

const Int8Kernels* int8_choice(const Problem& p, const Kernels& kernels) {
  const Int8Mode mode = int8_mode();
  if (mode == Int8Mode::Never || p.K % 4 != 0) return nullptr;
  const Int8Kernels* k = int8_kernels_for(kernels);
  if (k == nullptr || mode == Int8Mode::Always) return k;
  return p.M >= (p.bits == 4 ? k->min_rows_4bit : k->min_rows_8bit) ? k : nullptr;
}

void run_product(const Problem& p, const Kernels& kernels) {
  if (const Int8Kernels* k = int8_choice(p, kernels)) return k->product(p);
  thread_local std::vector<float> staging;
  const float* xk = p.x;
  if (p.bits == 4 && kernels.lanes > 1) {
    staging.resize(size_t(p.M) * p.K);
    prepare(p, kernels.lanes, staging.data());
    xk = staging.data();
  }
  // Whole blocks of 16 columns per task (the kernels take four at a time).
  split(size_t(p.N), size_t(p.K) * p.M, 16, [&](size_t n0, size_t n1) {
    kernels.rows(p, xk, int(n0), int(n1));
  });
}

}  // namespace cpu_kernels
