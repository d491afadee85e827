#include "ascent/prof/tracer.h"

#include <nlohmann/json.hpp>

#include "ascent/base/atomic_write.h"
#include "ascent/base/error.h"
#include "ascent/base/mapped_file.h"

namespace ascent::prof {
namespace {

void write_file(const std::string& path, const std::string& data) {
  write_file_atomic(path, {data});
}

thread_local Tracer* t_current = nullptr;

// Chrome trace track of pool thread i's matmul rows (track 0 holds the nodes).
constexpr int kPoolTrack = 100;

}  // namespace

Tracer* current_tracer() {
  return t_current;
}

TracerScope::TracerScope(Tracer* t) : previous_(t_current) {
  t_current = t;
}

TracerScope::~TracerScope() {
  t_current = previous_;
}

Tracer::Tracer() : start_(std::chrono::steady_clock::now()) {}

double Tracer::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
}

void Tracer::sample_memory(int64_t arena_bytes) {
  memory_.push_back({now_us(), arena_bytes, static_cast<int64_t>(resident_bytes())});
}

void Tracer::write_chrome_trace(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "ascent"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "graph nodes"}}}});
  for (const auto& e : events_) {
    events.push_back(
        {{"name", e.name},
         {"cat", e.op},
         {"ph", "X"},
         {"ts", e.ts_us},
         {"dur", e.dur_us},
         {"pid", 1},
         {"tid", e.tid},
         {"args",
          {{"op", e.op}, {"shapes", e.shapes}, {"bytes", e.bytes}, {"flops", e.flops}, {"threads", e.threads}}}});
  }
  std::vector<bool> named;
  for (size_t c = 0; c < calls_.size(); ++c) {
    for (const ThreadSpan& t : calls_[c].threads) {
      const auto i = static_cast<size_t>(t.thread);
      if (named.size() <= i) named.resize(i + 1, false);
      if (!named[i]) {
        named[i] = true;
        events.push_back({{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", 1},
                          {"tid", kPoolTrack + t.thread},
                          {"args", {{"name", "pool thread " + std::to_string(t.thread)}}}});
      }
      events.push_back({{"name", calls_[c].node},
                        {"cat", "rows"},
                        {"ph", "X"},
                        {"ts", t.ts_us},
                        {"dur", t.dur_us},
                        {"pid", 1},
                        {"tid", kPoolTrack + t.thread},
                        {"args",
                         {{"call", c},
                          {"rows", t.rows},
                          {"call_rows", calls_[c].rows},
                          {"bytes", t.bytes},
                          {"call_ts", calls_[c].ts_us},
                          {"call_dur", calls_[c].dur_us}}}});
    }
  }
  for (const auto& m : memory_) {
    events.push_back({{"name", "memory"},
                      {"ph", "C"},
                      {"ts", m.ts_us},
                      {"pid", 1},
                      {"tid", 0},
                      {"args", {{"arena_bytes", m.arena_bytes}, {"resident_bytes", m.resident_bytes}}}});
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  write_file(path, doc.dump());
}

void Tracer::write_memory_csv(const std::string& path) const {
  std::string csv = "time_us,arena_bytes,resident_bytes\n";
  for (const auto& m : memory_) {
    csv +=
        std::to_string(m.ts_us) + "," + std::to_string(m.arena_bytes) + "," + std::to_string(m.resident_bytes) + "\n";
  }
  write_file(path, csv);
}

}  // namespace ascent::prof
