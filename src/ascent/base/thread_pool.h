// A persistent pool of worker threads for data-parallel loops. Kernels split work with parallel_for. Workers are
// created once, spin briefly and then sleep between calls, so a decode step pays neither thread start-up nor a
// wake-up per loop. parallel_for's split is static: it depends only on n and the thread count. The dynamic and
// stealing variants hand out work by timing. They serve loops whose chunks compute the same whichever thread runs
// them, so results stay reproducible run to run either way. While they spin, workers can load bytes a caller named
// for them (warm_after_next_call: a decode thread's next weights) into their caches; that only reads memory.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

namespace ascent {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) on disjoint contiguous chunks covering [0, n); the calling thread runs chunk 0.
  // Returns when all chunks are done; the first exception thrown by any chunk is rethrown here.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  // Like parallel_for, but threads take `grain`-sized chunks of [0, n) in order from a shared counter until none
  // are left, so a thread slowed down (a busy neighbour on a shared host) does less of the work. Which thread runs
  // a chunk varies; what a chunk computes must not depend on it.
  void parallel_for_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  // Balances like parallel_for_dynamic, but each thread owns a contiguous share of [0, n) (parallel_for's split)
  // and takes it front to back in `grain`-sized chunks. So the chunks one thread runs are one sequential run rather
  // than every T-th chunk: a decode matmul streaming its weights restarts the hardware prefetchers once per share,
  // not once per chunk. A thread whose share is done steals the back half of the largest share left and walks that
  // the same way. Which thread runs a chunk varies; what a chunk computes must not.
  void parallel_for_stealing(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // parallel_for's split: the chunk [begin, end) of [0, n) that thread `index` of `threads` runs (and owns in
  // parallel_for_stealing).
  static std::pair<int64_t, int64_t> share(int64_t n, int threads, int index);
  // The index of the pool thread running this: a worker's (1 .. size() - 1) inside its loop, 0 on any other thread
  // (a parallel call's caller runs as thread 0). For per-thread records such as the profiler's (kernels' matmul calls).
  static int current_index();

  // Bytes worker `index` (1 .. size() - 1) will read soon, for the next parallel call: a decode thread's next
  // weights (model/weight_layout.h). The worker pulls them into its cache whenever it would otherwise spin idle after
  // that call: between calls and through the steps the caller runs alone. It stops when they are done or a later
  // call names other bytes. It loads a few lines at a time and checks for new work between them, so a call never
  // waits on it long. The bytes are only read (they must be readable), so results do not change. The caller does
  // not warm: at a call's end it would take bandwidth from the worker still finishing the call, which made decode
  // slower (measured with bench/ab_decode.py).
  void warm_after_next_call(int index, std::span<const uint8_t> bytes);
  // Before bytes named to warm_after_next_call are freed: every worker drops what it was given so far, and this
  // returns once none can still be reading them (a worker mid-round finishes that round first). The global pool's
  // (forget_warm_global; nothing when there is none): placed weights call it as their buffer is freed.
  void forget_warm();
  static void forget_warm_global();

  // What the pool's threads do right now, so that a test waits for a state instead of sleeping until it is likely:
  // workers blocked (or about to block) until the next call, the caller blocked (or about to) until its workers
  // finish, worker `index` loading named bytes.
  int sleeping_workers() const { return sleepers_.load(std::memory_order_seq_cst); }
  bool caller_sleeping() const { return caller_waiting_.load(std::memory_order_seq_cst); }
  bool warming(int index) const { return warming_[static_cast<size_t>(index)].busy.load(std::memory_order_seq_cst); }

  // The process-wide pool that kernels use. Its size is set once by the program (-t), default: all cores.
  static ThreadPool& global();
  // Replaces the global pool when the size differs (the old one's workers are joined). Only while no other thread
  // uses the pool or frees placed weights: forget_warm_global reads the pool's address without a lock, and a pool
  // destroyed under it would be a use after free. The CLI calls it once, before any model loads.
  static void set_global_threads(int n_threads);

 private:
  void worker_loop(int index);
  void drop_warm();  // forgets warm_after_next_call's bytes (a call that ran on the caller alone never used them)

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  std::atomic<uint64_t> generation_{0};  // bumped to start a loop
  std::atomic<int> pending_{0};          // workers still running the current loop
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};             // workers blocked, or about to block, on start_cv_
  std::atomic<bool> caller_waiting_{false};  // the caller blocked, or about to block, on done_cv_
  int64_t n_ = 0;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  std::exception_ptr error_;
  std::vector<std::span<const uint8_t>> warm_next_;  // per thread index: warm_after_next_call's bytes
  // forget_warm's handshake: a worker reads warm_epoch_ between raising and lowering its flag around each round of
  // loads, and drops its bytes once the epoch has moved on from the one it took them under.
  std::atomic<uint64_t> warm_epoch_{0};
  struct alignas(64) WarmFlag {
    std::atomic<bool> busy{false};
  };
  std::vector<WarmFlag> warming_;  // per thread index (0 unused: the caller does not warm)
};

}  // namespace ascent
