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

  const std::vector<TraceEvent>& events() const { return events_; }
  int64_t plans_compiled() const { return plans_compiled_; }

  // Both write PATH.tmp and rename it, so a failed write leaves nothing half-written behind.
  void write_chrome_trace(const std::string& path) const;
  void write_memory_csv(const std::string& path) const;

 private:
  std::chrono::steady_clock::time_point start_;
  std::vector<TraceEvent> events_;
  std::vector<MemorySample> memory_;
  int64_t plans_compiled_ = 0;
};

}  // namespace ascent::prof
