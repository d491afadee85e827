// Prometheus text exposition (format 0.0.4) for /metrics: histograms the server fills, and a writer that renders
// counters, gauges and histograms with their HELP and TYPE lines.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ascent::serve {

// Observations counted in buckets with upper bounds `bounds` (ascending) and one past the last (+Inf).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket, not cumulative: counts()[i] holds bounds[i-1] < v <= bounds[i]; the last entry, v > every bound.
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Label pairs of one sample, e.g. {{"code", "200"}}.
using Labels = std::vector<std::pair<std::string, std::string>>;

class PrometheusWriter {
 public:
  void counter(const std::string& name, const std::string& help, double value);
  void counter(const std::string& name, const std::string& help, std::span<const std::pair<Labels, double>> samples);
  void gauge(const std::string& name, const std::string& help, double value);
  void histogram(const std::string& name, const std::string& help, const Histogram& h);
  // A histogram whose per-bucket counts (not cumulative; one more than bounds when the last is the +Inf overflow) and
  // sum come from elsewhere. Without a sum the _sum line is left out rather than made up.
  void histogram(const std::string& name, const std::string& help, std::span<const double> bounds,
                 std::span<const uint64_t> counts, std::optional<double> sum);
  const std::string& text() const { return out_; }

 private:
  void family(const std::string& name, const std::string& help, const char* type);
  void sample(const std::string& name, const Labels& labels, double value);
  std::string out_;
};

// A number as Prometheus reads it: integers without a fraction, +Inf, -Inf, NaN.
std::string prometheus_number(double v);

}  // namespace ascent::serve
