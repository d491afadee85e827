#include "ascent/base/thread_pool.h"

#include <algorithm>
#include <memory>

namespace ascent {
namespace {

std::pair<int64_t, int64_t> chunk(int64_t n, int parts, int index) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

namespace {

// Spin-wait rounds before sleeping: decode runs ~100 short parallel loops per token, and waking a sleeping thread
// costs tens of microseconds (a futex round trip, more in a VM), so workers and the caller poll for about a tenth
// of a millisecond first.
constexpr int kSpinRounds = 4000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpinRounds && generation_.load(std::memory_order_acquire) == seen; ++i) cpu_relax();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    const auto* fn = fn_;
    const int64_t n = n_;
    auto [b, e] = chunk(n, n_threads_, index);
    if (b < e) {
      try {
        (*fn)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);  // pairs with the caller's predicate check: no lost wake-up
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    n_ = n;
    error_ = nullptr;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  start_cv_.notify_all();
  std::exception_ptr err;
  auto [b, e] = chunk(n, n_threads_, 0);
  try {
    if (b < e) fn(b, e);
  } catch (...) {
    err = std::current_exception();
  }
  for (int i = 0; i < kSpinRounds && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  if (!err) err = error_;
  fn_ = nullptr;
  lock.unlock();
  if (err) std::rethrow_exception(err);
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  std::atomic<int64_t> next{0};
  parallel_for(n_threads_, [&](int64_t, int64_t) {
    for (;;) {
      const int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
      if (b >= n) return;
      fn(b, std::min(n, b + grain));
    }
  });
}

ThreadPool& ThreadPool::global() {
  auto& slot = global_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return *slot;
}

void ThreadPool::set_global_threads(int n_threads) {
  auto& slot = global_slot();
  if (slot && slot->size() == n_threads) return;
  slot = std::make_unique<ThreadPool>(n_threads);
}

}  // namespace ascent
