#include "threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <new>
#include <memory>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define CPU_KERNELS_PAUSE() _mm_pause()
#else
#define CPU_KERNELS_PAUSE() std::this_thread::yield()
#endif

namespace cpu_kernels {
namespace {

// Workers spin this long after a product before sleeping: a decode step runs a couple of
// hundred products with a few microseconds of other work between them, and waking a sleeping
// thread costs tens of microseconds.
constexpr auto SPIN = std::chrono::microseconds(300);
// Spinning workers look at the clock once per this many pauses. A pause is slow on some CPUs
// (54 ns measured on our AMD Zen 4 VMs) and so is the clock, so a worker looks for the next product
// after every pause: a one-token product on a small model takes only a few microseconds per
// thread, and a worker that looked only every 64 pauses (3.5 us there) came late to each.
constexpr int PAUSES_PER_CLOCK = 64;

std::mutex shared_mutex;
std::shared_ptr<Pool> shared_pool;
int wanted_threads = 0;

// The cores this process may run on (a container's cpuset, not the host's count).
int cores() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

// A forked child has none of the parent's workers: it forgets the parent's pool (leaking it,
// since joining threads that do not exist would hang) and makes its own on first use.
void forget_after_fork() {
  new (std::nothrow) std::shared_ptr<Pool>(std::move(shared_pool));
  shared_pool.reset();
}

}  // namespace

Pool::Pool(int threads) {
  for (int i = 1; i < threads; i++) workers_.emplace_back([this, i] { work(i); });
}

Pool::~Pool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void Pool::drain(const std::function<void(int)>& task, int count) {
  for (int i = next_.fetch_add(1); i < count; i = next_.fetch_add(1)) {
    task(i);
    done_.fetch_add(1, std::memory_order_release);
  }
}

void Pool::parallel_for(int count, const std::function<void(int)>& task) {
  std::unique_lock<std::mutex> submit(submit_, std::try_to_lock);
  if (workers_.empty() || count <= 1 || !submit.owns_lock()) {
    for (int i = 0; i < count; i++) task(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    count_ = count;
    next_.store(0);
    done_.store(0);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleeping_.load() > 0) wake_.notify_all();
  drain(task, count);
  while (done_.load(std::memory_order_acquire) < count) CPU_KERNELS_PAUSE();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = nullptr;
  }
  // No worker may still hold this task when the next product resets the counter.
  while (active_.load(std::memory_order_acquire) > 0) CPU_KERNELS_PAUSE();
}

void Pool::spin(uint64_t seen) const {
  const auto until = std::chrono::steady_clock::now() + SPIN;
  for (int pauses = 1; generation_.load(std::memory_order_acquire) == seen; pauses++) {
    CPU_KERNELS_PAUSE();
    if (pauses % PAUSES_PER_CLOCK == 0 && std::chrono::steady_clock::now() >= until) return;
  }
}

void Pool::work(int) {
  uint64_t seen = 0;
  while (true) {
    spin(seen);
    std::unique_lock<std::mutex> lock(mutex_);
    if (generation_.load() == seen) {
      sleeping_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleeping_.fetch_sub(1);
    }
    seen = generation_.load();
    if (stop_) return;
    if (task_ == nullptr) continue;  // that product finished before this worker looked
    const auto* task = task_;
    int count = count_;
    active_.fetch_add(1);
    lock.unlock();
    drain(*task, count);
    active_.fetch_sub(1, std::memory_order_release);
  }
}

std::shared_ptr<Pool> Pool::shared() {
  static const bool registered = pthread_atfork(nullptr, nullptr, forget_after_fork) == 0;
  (void)registered;
  std::lock_guard<std::mutex> lock(shared_mutex);
  if (!shared_pool) shared_pool = std::make_shared<Pool>(wanted_threads > 0 ? wanted_threads : cores());
  return shared_pool;
}

void Pool::configure(int threads) {
  std::lock_guard<std::mutex> lock(shared_mutex);
  wanted_threads = threads;
  shared_pool.reset();
}

void split(size_t n, size_t work_per_item, size_t align,
           const std::function<void(size_t, size_t)>& body) {
  constexpr size_t SMALL = 65536;  // values: below this a hand-off costs more than it saves
  auto pool = Pool::shared();
  const size_t threads = size_t(pool->threads());
  if (threads == 1 || n < 2 || n * work_per_item < SMALL) {
    body(0, n);
    return;
  }
  size_t per = std::max((n + 4 * threads - 1) / (4 * threads), SMALL / 4 / work_per_item);
  per = std::max<size_t>(1, (per + align - 1) / align) * align;
  const int tasks = int((n + per - 1) / per);
  pool->parallel_for(tasks, [&](int t) { body(t * per, std::min(n, (t + 1) * per)); });
}

}  // namespace cpu_kernels
