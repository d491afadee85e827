#include "ascent/serve/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ascent::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // first bound >= v
  ++counts_[static_cast<size_t>(at)];
  sum_ += v;
  ++count_;
}

std::string prometheus_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

namespace {

// Label values escape backslash, double quote and newline (the format's only escapes).
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// HELP text escapes backslash and newline.
std::string escape_help(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void PrometheusWriter::family(const std::string& name, const std::string& help, const char* type) {
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(help), name, type);
}

void PrometheusWriter::sample(const std::string& name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      out_ += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first, escape_label(labels[i].second));
    }
    out_ += '}';
  }
  out_ += ' ' + prometheus_number(value) + '\n';
}

void PrometheusWriter::counter(const std::string& name, const std::string& help, double value) {
  family(name, help, "counter");
  sample(name, {}, value);
}

void PrometheusWriter::counter(const std::string& name, const std::string& help,
                               std::span<const std::pair<Labels, double>> samples) {
  family(name, help, "counter");
  for (const auto& [labels, value] : samples) sample(name, labels, value);
}

void PrometheusWriter::gauge(const std::string& name, const std::string& help, double value) {
  family(name, help, "gauge");
  sample(name, {}, value);
}

void PrometheusWriter::histogram(const std::string& name, const std::string& help, const Histogram& h) {
  histogram(name, help, h.bounds(), h.counts(), h.sum());
}

void PrometheusWriter::histogram(const std::string& name, const std::string& help, std::span<const double> bounds,
                                 std::span<const uint64_t> counts, std::optional<double> sum) {
  family(name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    sample(name + "_bucket", {{"le", prometheus_number(bounds[i])}}, static_cast<double>(cumulative));
  }
  for (size_t i = bounds.size(); i < counts.size(); ++i) cumulative += counts[i];
  sample(name + "_bucket", {{"le", "+Inf"}}, static_cast<double>(cumulative));
  if (sum) sample(name + "_sum", {}, *sum);
  sample(name + "_count", {}, static_cast<double>(cumulative));
}

}  // namespace ascent::serve
