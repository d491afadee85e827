// Records what a graph run did, node by node, and writes it as a Chrome trace (chrome://tracing, Perfetto) and
// a memory CSV. The executor fills it when a tracer is attached; nothing is recorded otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ascent::prof {

struct TraceEvent {
  std::string name;    // node name, "blk.3.ffn_down"
  std::string op;      // op kind
  std::string shapes;  // "(7, 2048) -> (7, 5632)"
  int64_t bytes = 0;   // bytes read and written (weights included)
  int64_t flops = 0;
  double ts_us = 0, dur_us = 0;
  int tid = 0;
  int threads = 1;
};

// One pool thread's part of a parallel matmul call (kernels/cpu/matmul_cpu.cc). It spans from the start of the thread's
// first chunk of rows to the end of its last. It counts the output rows the thread computed (its own share and any it
// stole) and the weight bytes those rows read. Bytes are counted as the node events count weights: the codes, without
// int8/int4 scales.
struct ThreadSpan {
  int thread = 0;  // ThreadPool::current_index(): 0 the calling thread, 1.. the workers
  double ts_us = 0, dur_us = 0;
  int64_t rows = 0, bytes = 0;
};

// One parallel matmul call: the node it ran in, fork to join on the calling thread, its output rows (all weights of a
// merged call), and the span of each thread that took rows.
struct PoolCall {
  std::string node;
  double ts_us = 0, dur_us = 0;
  int64_t rows = 0;
  std::vector<ThreadSpan> threads;
};

struct MemorySample {
  double ts_us = 0;
  int64_t arena_bytes = 0, resident_bytes = 0;
};

class Tracer {
 public:
  Tracer();
  double now_us() const;
  void add(TraceEvent e) { events_.push_back(std::move(e)); }
  void sample_memory(int64_t arena_bytes);
  void count_plan_compiled() { ++plans_compiled_; }
  // The node now running (the executor sets it before each), which the pool calls made meanwhile are filed under.
  void set_node(const std::string& name) { node_ = name; }
  const std::string& node() const { return node_; }
  // On the thread that owns the tracer, after the call's join (the workers' spans are complete by then).
  void add_call(PoolCall c) { calls_.push_back(std::move(c)); }

  const std::vector<TraceEvent>& events() const { return events_; }
  const std::vector<PoolCall>& calls() const { return calls_; }
  int64_t plans_compiled() const { return plans_compiled_; }

  // Both write PATH.tmp and rename it, so a failed write leaves nothing half-written behind. The trace puts the
  // nodes on one track and each pool thread's matmul rows on its own ("pool thread N"), named by their node.
  void write_chrome_trace(const std::string& path) const;
  void write_memory_csv(const std::string& path) const;

 private:
  std::chrono::steady_clock::time_point start_;
  std::vector<TraceEvent> events_;
  std::vector<PoolCall> calls_;
  std::string node_;
  std::vector<MemorySample> memory_;
  int64_t plans_compiled_ = 0;
};

// The tracer the kernels on this thread report their pool calls to (kernels/cpu/matmul_cpu.cc), or null: set by
// the executor for the length of a traced run, per thread, so runs on other threads are not mixed in.
Tracer* current_tracer();

// Makes t the calling thread's current_tracer until the scope ends (then the previous one again).
class TracerScope {
 public:
  explicit TracerScope(Tracer* t);
  ~TracerScope();
  TracerScope(const TracerScope&) = delete;
  TracerScope& operator=(const TracerScope&) = delete;

 private:
  Tracer* previous_;
};

}  // namespace ascent::prof
