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

}  // namespace

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
