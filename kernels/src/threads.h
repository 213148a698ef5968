// A small pool of workers that stay awake between the many short products of a decode step.
#pragma once

#include <atomic>
#include <cstddef>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cpu_kernels {

class Pool {
 public:
  // `threads` counts the caller, which always takes a share.
  explicit Pool(int threads);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int threads() const { return int(workers_.size()) + 1; }
  // Runs task(i) for i in [0, count) on the caller and the workers; returns when all are done.
  // A second caller arriving while the workers are busy (another MLX stream) runs its tasks
  // alone rather than wait.
  void parallel_for(int count, const std::function<void(int)>& task);

  // The process's pool; callers keep the pointer while they use it.
  static std::shared_ptr<Pool> shared();
  // Sizes the shared pool (threads <= 0: one per core); takes effect for later products.
  static void configure(int threads);

 private:
  void work(int id);
  // Returns when a product newer than `seen` is published, or after SPIN without one.
  void spin(uint64_t seen) const;
  void drain(const std::function<void(int)>& task, int count);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::mutex submit_;  // one product at a time uses the workers
  std::condition_variable wake_;
  const std::function<void(int)>* task_ = nullptr;
  int count_ = 0;
  std::atomic<int> next_{0};
  std::atomic<int> done_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<int> active_{0};  // workers inside drain()
  bool stop_ = false;
};

// Runs body(begin, end) over [0, n) on the shared pool, in ranges of whole multiples of
// `align` items, several per thread (one slowed by the scheduler does not hold up the rest)
// and each worth at least a hand-off; in one call on the caller when the whole job is small.
// `work_per_item` is a rough cost (values touched) of one item.
void split(size_t n, size_t work_per_item, size_t align,
           const std::function<void(size_t, size_t)>& body);

}  // namespace cpu_kernels
