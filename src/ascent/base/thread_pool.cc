#include "ascent/base/thread_pool.h"

#include <algorithm>
#include <memory>

#include "ascent/base/error.h"

namespace ascent {
namespace {

std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}

// The global pool for forget_warm_global: a plain atomic, readable at any time (weights freed during exit may come
// after the slot above is gone), set while the pool lives.
std::atomic<ThreadPool*> g_global_pool{nullptr};

thread_local int t_pool_index = 0;  // set by worker_loop for its thread (current_index)

}  // namespace

int ThreadPool::current_index() {
  return t_pool_index;
}

std::pair<int64_t, int64_t> ThreadPool::share(int64_t n, int threads, int index) {
  const int64_t base = n / threads, extra = n % threads;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)), warming_(static_cast<size_t>(n_threads_)) {
  warm_next_.resize(static_cast<size_t>(n_threads_));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  ThreadPool* self = this;
  g_global_pool.compare_exchange_strong(self, nullptr);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

namespace {

// Spin-wait rounds before sleeping. Decode runs ~100 short parallel loops per token, and waking a sleeping thread
// costs tens of microseconds (a futex round trip, more in a VM). So workers and the caller poll for about a tenth
// of a millisecond first.
constexpr int kSpinRounds = 4000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// One spin round of warming: the next 512 bytes of `bytes` loaded (one byte a line), or a pause when none are left.
// Loads, not prefetch instructions: a core drops many software prefetches when its queues are full, so bytes
// requested with prefetcht1 read back barely faster than a cold read, and bytes touched by loads read back from L2.
// Eight lines a round keep the core's misses in flight without holding up its
// check for new work long. A round runs between raising and lowering `busy`, and only while `epoch` still reads
// `taken`. That is forget_warm's handshake, seq_cst on both sides: either forget_warm sees the flag up and waits for
// the round, or the round sees the new epoch and drops the bytes.
void warm_or_relax(std::span<const uint8_t>& bytes, std::atomic<bool>& busy, const std::atomic<uint64_t>& epoch,
                   uint64_t taken) {
  if (bytes.empty()) return cpu_relax();
  busy.store(true, std::memory_order_seq_cst);
  if (epoch.load(std::memory_order_seq_cst) != taken) {
    bytes = {};
  } else {
    const size_t n = std::min<size_t>(bytes.size(), 512);
    uint8_t touched = 0;
    for (size_t o = 0; o < n; o += 64) touched ^= bytes[o];
    asm volatile("" : : "r"(touched));  // the loads are the point: keep them
    bytes = bytes.subspan(n);
  }
  busy.store(false, std::memory_order_release);
}

}  // namespace

void ThreadPool::warm_after_next_call(int index, std::span<const uint8_t> bytes) {
  ASCENT_CHECK(index >= 1 && index < n_threads_, "warm_after_next_call: thread {} is not a worker of a pool of {}",
               index, n_threads_);
  warm_next_[static_cast<size_t>(index)] = bytes;
}

void ThreadPool::forget_warm() {
  warm_epoch_.fetch_add(1, std::memory_order_seq_cst);
  for (WarmFlag& f : warming_) {
    while (f.busy.load(std::memory_order_seq_cst)) cpu_relax();
  }
}

void ThreadPool::forget_warm_global() {
  if (ThreadPool* pool = g_global_pool.load(std::memory_order_acquire)) pool->forget_warm();
}

void ThreadPool::worker_loop(int index) {
  t_pool_index = index;
  uint64_t seen = 0;
  std::span<const uint8_t> warm;  // kept across calls that name no bytes (the caller's loops between matmuls)
  uint64_t warm_taken = 0;        // warm_epoch_ when warm was taken
  std::atomic<bool>& busy = warming_[static_cast<size_t>(index)].busy;
  for (;;) {
    for (int i = 0; i < kSpinRounds && generation_.load(std::memory_order_acquire) == seen; ++i) {
      warm_or_relax(warm, busy, warm_epoch_, warm_taken);
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      // Announced before the predicate is checked under the mutex (both seq_cst, like the caller's generation
      // bump and its read of sleepers_): either the caller sees a sleeper and notifies, or this thread sees the
      // new generation.
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_seq_cst) != seen; });
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    const auto* fn = fn_;
    const int64_t n = n_;
    if (!warm_next_[static_cast<size_t>(index)].empty()) {
      warm = warm_next_[static_cast<size_t>(index)];
      warm_taken = warm_epoch_.load(std::memory_order_seq_cst);
    }
    auto [b, e] = share(n, n_threads_, index);
    if (b < e) {
      try {
        (*fn)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 && caller_waiting_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mutex_);  // the caller is checking or waiting: no lost wake-up
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return drop_warm();
  if (n_threads_ == 1 || n == 1) {
    drop_warm();
    fn(0, n);
    return;
  }
  // The mutex is taken only to sleep or wake a sleeper. A decode token runs ~150 of these loops. If the caller and a
  // worker both took it on every loop, they would collide often enough to idle a core for several percent of decode
  // (each collision is a futex call, a trip through the kernel).
  fn_ = &fn;
  n_ = n;
  error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes fn_, n_ and pending_ to the workers
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }  // a sleeper is now waiting or will see the new generation
    start_cv_.notify_all();
  }
  std::exception_ptr err;
  auto [b, e] = share(n, n_threads_, 0);
  try {
    if (b < e) fn(b, e);
  } catch (...) {
    err = std::current_exception();
  }
  for (int i = 0; i < kSpinRounds && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  if (pending_.load(std::memory_order_acquire) != 0) {
    caller_waiting_.store(true, std::memory_order_seq_cst);
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_seq_cst) == 0; });
    caller_waiting_.store(false, std::memory_order_relaxed);
  }
  if (!err) err = error_;  // workers are done: their writes happened before their pending_ decrements
  fn_ = nullptr;
  drop_warm();  // the workers have taken theirs
  if (err) std::rethrow_exception(err);
}

void ThreadPool::drop_warm() {
  for (auto& w : warm_next_) w = {};
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return drop_warm();
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

namespace {

// A share [begin, end) in one word, so owner (moving begin) and thieves (moving end) update it with one CAS.
uint64_t pack_share(int64_t begin, int64_t end) {
  return static_cast<uint64_t>(begin) << 32 | static_cast<uint64_t>(end);
}
int64_t share_begin(uint64_t s) {
  return static_cast<int64_t>(s >> 32);
}
int64_t share_end(uint64_t s) {
  return static_cast<int64_t>(s & 0xffffffffu);
}

struct alignas(64) Share {  // one cache line each: owners claim chunks without touching each other's lines
  std::atomic<uint64_t> range{0};
};

}  // namespace

void ThreadPool::parallel_for_stealing(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return drop_warm();
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    drop_warm();
    fn(0, n);
    return;
  }
  if (n >= (int64_t{1} << 32)) {  // a share must fit half a word; no loop here comes near
    parallel_for_dynamic(n, grain, fn);
    return;
  }
  std::vector<Share> shares(static_cast<size_t>(n_threads_));
  for (int t = 0; t < n_threads_; ++t) {
    const auto [b, e] = share(n, n_threads_, t);
    shares[static_cast<size_t>(t)].range.store(pack_share(b, e), std::memory_order_relaxed);
  }
  parallel_for(n_threads_, [&](int64_t self, int64_t) {
    std::atomic<uint64_t>& own = shares[static_cast<size_t>(self)].range;
    for (;;) {
      // Own share, front to back.
      uint64_t cur = own.load(std::memory_order_acquire);
      while (share_begin(cur) < share_end(cur)) {
        // Chunks shrink to half of what is left near a share's end, so the two threads reach the barrier within a
        // row group of each other rather than a whole grain apart.
        const int64_t left = share_end(cur) - share_begin(cur);
        const int64_t b = share_begin(cur), e = b + std::min(grain, std::max<int64_t>(1, left / 2));
        if (!own.compare_exchange_weak(cur, pack_share(e, share_end(cur)), std::memory_order_acq_rel)) continue;
        fn(b, e);
        cur = own.load(std::memory_order_acquire);
      }
      // Steal the back half of the largest share with two or more items left; done when there is none. Shares of
      // a grain or less are stolen from too: otherwise the owner could finish up to a grain alone while this thread
      // waited.
      size_t victim = shares.size();
      int64_t most = 1;
      for (size_t t = 0; t < shares.size(); ++t) {
        const uint64_t s = shares[t].range.load(std::memory_order_acquire);
        if (share_end(s) - share_begin(s) > most) {
          most = share_end(s) - share_begin(s);
          victim = t;
        }
      }
      if (victim == shares.size()) return;
      uint64_t s = shares[victim].range.load(std::memory_order_acquire);
      const int64_t b = share_begin(s), e = share_end(s);
      if (e - b <= 1) continue;  // changed since the scan: look again
      const int64_t mid = b + (e - b) / 2;
      if (!shares[victim].range.compare_exchange_strong(s, pack_share(b, mid), std::memory_order_acq_rel)) continue;
      own.store(pack_share(mid, e), std::memory_order_release);
    }
  });
}

ThreadPool& ThreadPool::global() {
  auto& slot = global_slot();
  if (!slot) {
    slot = std::make_unique<ThreadPool>(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    g_global_pool.store(slot.get(), std::memory_order_release);
  }
  return *slot;
}

void ThreadPool::set_global_threads(int n_threads) {
  auto& slot = global_slot();
  if (slot && slot->size() == n_threads) return;
  slot = std::make_unique<ThreadPool>(n_threads);
  g_global_pool.store(slot.get(), std::memory_order_release);
}

}  // namespace ascent
