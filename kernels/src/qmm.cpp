#include "qmm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "int8.h"
#include "panels.h"
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
std::atomic<int> int8_rows_setting{0};

// The row count auto decides by (set_int8_rows).
int deciding_rows(const Problem& p) {
  const int rows = int8_rows_setting.load(std::memory_order_relaxed);
  return rows > 0 ? rows : p.M;
}

// Whether auto takes a many-rows path whose thresholds are these, by bits.
bool enough_rows(const Problem& p, int min_rows_4bit, int min_rows_8bit) {
  return deciding_rows(p) >= (p.bits == 4 ? min_rows_4bit : min_rows_8bit);
}

}  // namespace

bool supported(int bits, int group) {
  if (bits == 6) return group == 16;  // GGUF's Q6_K (k6.h)
  return (bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128);
}

bool supports_k6(const Kernels& kernels) {
  return k6_direct_for(kernels) != nullptr;
}

const DirectInt8* k6_direct_for(const Kernels& kernels, bool x8) {
#ifndef CPU_KERNELS_GENERIC_ONLY
  // AVX-512 VNNI only: on AVX2 the unpacking made them compute-bound, slower than MLX's 8-bit
  // (2048x6144 from memory, two cores: 712-733 against 661-706 us at one row, 1296-1566
  // against 956-1203 at four), so there the engine keeps Q6_K as 8-bit.
  if (std::string(kernels.isa) == "avx512") return x8 ? vnni_k6_x8() : vnni_k6();
#else
  (void)kernels;
  (void)x8;
#endif
  return nullptr;
}

const DirectInt8* x8_direct_for(const Kernels& kernels) {
#ifndef CPU_KERNELS_GENERIC_ONLY
  if (std::string(kernels.isa) == "avx512") return vnni_direct_x8();
#else
  (void)kernels;
#endif
  return nullptr;
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

void set_int8_rows(int rows) {
  int8_rows_setting.store(rows);
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
  if (mode != Int8Mode::Auto && mode != Int8Mode::Always) return nullptr;
  if (p.K % 4 != 0) return nullptr;
  const Int8Kernels* k = int8_kernels_for(kernels);
  if (k == nullptr || mode == Int8Mode::Always) return k;
  return enough_rows(p, k->min_rows_4bit, k->min_rows_8bit) ? k : nullptr;
}

const DirectInt8* direct_kernels_for(const Kernels& kernels) {
#ifndef CPU_KERNELS_GENERIC_ONLY
  const std::string isa(kernels.isa);
  if (isa == "avx512") {
    const DirectInt8* vnni = vnni_direct_int8();
    return vnni != nullptr ? vnni : avx2_direct_int8();
  }
  if (isa == "avx2") return avx2_direct_int8();
#else
  (void)kernels;
#endif
  return nullptr;
}

const DirectInt8* direct_choice(const Problem& p, const Kernels& kernels, bool any_width) {
  const Int8Mode mode = int8_mode();
  if (mode != Int8Mode::Auto && mode != Int8Mode::Direct) return nullptr;
  const DirectInt8* k = direct_kernels_for(kernels);
  if (k == nullptr) return nullptr;
  if (mode == Int8Mode::Direct) return k;
  const bool wide = any_width || p.K >= k->min_features;
  const int bound = p.x_bytes == 1 ? k->max_rows_one_byte : k->max_rows;
  return deciding_rows(p) <= bound && wide ? k : nullptr;
}

const Panels* panels_for(const Kernels& kernels) {
#ifndef CPU_KERNELS_GENERIC_ONLY
  // Wherever the integer tiles would be AVX2's (AVX2, AVX-512 without VNNI).
  const Int8Kernels* tiles = int8_kernels_for(kernels);
  if (tiles != nullptr && tiles == avx2_int8_kernels()) return avx2_panels();
#else
  (void)kernels;
#endif
  return nullptr;
}

const Panels* panels_choice(const Problem& p, const Kernels& kernels) {
  const Int8Mode mode = int8_mode();
  if (mode != Int8Mode::Auto && mode != Int8Mode::Panels) return nullptr;
  const Panels* k = panels_for(kernels);
  if (k == nullptr || mode == Int8Mode::Panels) return k;
  return enough_rows(p, k->min_rows_4bit, k->min_rows_8bit) ? k : nullptr;
}

namespace {

// x as the float kernels read it (prepare()); valid until the caller's next product.
const float* staged(const Problem& p, const Kernels& kernels) {
  thread_local std::vector<float> staging;
  if (p.bits != 4 || kernels.lanes == 1) return p.x;
  staging.resize(size_t(p.M) * p.K);
  prepare(p, kernels.lanes, staging.data());
  return staging.data();
}

// Whether products can share one staged x: the same activations, read alike (the direct
// path rounds them per group of the weights, so its products need the same group too).
bool same_activations(const Problem* ps, int count, bool by_group) {
  for (int i = 1; i < count; i++) {
    const Problem& p = ps[i];
    if (p.x != ps[0].x || p.M != ps[0].M || p.K != ps[0].K || p.bits != ps[0].bits) return false;
    if (p.x_bytes != ps[0].x_bytes || p.x8 != ps[0].x8) return false;
    if (by_group && p.group != ps[0].group) return false;
  }
  return true;
}

}  // namespace

void run_product(const Problem& p, const Kernels& kernels) {
  run_products(&p, 1, kernels);
}

namespace {

// Weights in a layout of their own (Q6_K's, or MLX's interleaved eight columns at a time):
// the direct path up to its row bound, the integer tiles past it (or as a mode forces
// either); they have no float path.
void run_own_layout(const Problem* ps, int count, const Kernels& kernels) {
  const bool k6 = ps[0].bits == 6;
  const DirectInt8* direct = k6 ? k6_direct_for(kernels, ps[0].x8) : x8_direct_for(kernels);
  const Int8Kernels* tiles = int8_kernels_for(kernels);
  if (direct == nullptr || tiles == nullptr) {
    throw std::runtime_error(std::string("[cpu_kernels] ") + (k6 ? "Q6_K weights" : "weights in the x8 layout") +
                             " need AVX-512 VNNI (this build or CPU has none)");
  }
  if (count > 1 && !same_activations(ps, count, true)) {  // other formats among them too
    for (int i = 0; i < count; i++) run_products(&ps[i], 1, kernels);
    return;
  }
  const Int8Mode mode = int8_mode();
  const int bound = ps[0].x_bytes == 1 ? direct->max_rows_one_byte : direct->max_rows;
  const bool many = deciding_rows(ps[0]) > bound;
  if (mode != Int8Mode::Direct && (many || mode == Int8Mode::Always)) {
    for (int i = 0; i < count; i++) tiles->product(ps[i]);
    return;
  }
  thread_local std::vector<uint8_t> staging;  // staged in the calling thread, read by the workers
  staging.resize(direct->row_bytes(ps[0]) * ps[0].M);
  direct->stage(ps[0], staging.data());
  std::vector<StagedProduct> parts;
  for (int i = 0; i < count; i++) parts.push_back({&ps[i], direct, staging.data()});
  split_columns(parts.data(), parts.size(), kernels);
}

}  // namespace

void run_products(const Problem* ps, int count, const Kernels& kernels) {
  if (count < 1) return;
  if (ps[0].bits == 6 || ps[0].x8) return run_own_layout(ps, count, kernels);
  // Few rows: the direct integer path where there is one; many: the float panels (AVX2) or
  // the integer tiles (VNNI); else floats.
  const DirectInt8* direct = direct_choice(ps[0], kernels);
  const Panels* panels = direct != nullptr ? nullptr : panels_choice(ps[0], kernels);
  const Int8Kernels* int8 = direct || panels ? nullptr : int8_choice(ps[0], kernels);
  const bool whole = int8 != nullptr || panels != nullptr;  // each splits its own product
  if (count > 1 && (whole || !same_activations(ps, count, direct != nullptr))) {
    for (int i = 0; i < count; i++) run_products(&ps[i], 1, kernels);
    return;
  }
  if (panels != nullptr) return panels->product(ps[0]);
  if (int8 != nullptr) return int8->product(ps[0]);
  // Staged here, in the calling thread: the workers would see their own buffers.
  thread_local std::vector<uint8_t> direct_staging;
  const void* x = nullptr;
  if (direct != nullptr) {
    direct_staging.resize(direct->row_bytes(ps[0]) * ps[0].M);
    direct->stage(ps[0], direct_staging.data());
    x = direct_staging.data();
  } else {
    x = staged(ps[0], kernels);
  }
  std::vector<StagedProduct> parts;
  for (int i = 0; i < count; i++) parts.push_back({&ps[i], direct, x});
  split_columns(parts.data(), parts.size(), kernels);
}

void split_columns(const StagedProduct* parts, size_t count, const Kernels& kernels) {
  std::vector<size_t> starts(count + 1, 0);
  int rows = 0;
  for (size_t i = 0; i < count; i++) {
    starts[i + 1] = starts[i] + (size_t(parts[i].p->N) + 15) / 16 * 16;
    rows = std::max(rows, parts[i].p->M);
  }
  split(starts[count], size_t(parts[0].p->K) * rows, 16, [&](size_t c0, size_t c1) {
    // The parts whose columns meet [c0, c1): from the last start at or before c0.
    size_t i = std::upper_bound(starts.begin(), starts.end(), c0) - starts.begin() - 1;
    for (; i < count && starts[i] < c1; i++) {
      const Problem& p = *parts[i].p;
      const size_t lo = starts[i], hi = lo + size_t(p.N);
      if (c0 >= hi) continue;
      const int n0 = int(std::max(c0, lo) - lo), n1 = int(std::min(c1, hi) - lo);
      if (parts[i].direct != nullptr) {
        parts[i].direct->columns(p, static_cast<const uint8_t*>(parts[i].staged), n0, n1);
      } else {
        kernels.rows(p, static_cast<const float*>(parts[i].staged), n0, n1);
      }
    }
  });
}

}  // namespace cpu_kernels
