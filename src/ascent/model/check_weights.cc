#include "ascent/model/check_weights.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"

namespace ascent::model {
namespace {

uint16_t u16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// The first i in [0, n) with bad(i), or n. Each pool thread scans its share and stops at its first find (or at one
// below its start found by another). So a sound tensor is read once and a damaged one stops early.
template <class Bad>
int64_t first_bad(int64_t n, const Bad& bad) {
  std::atomic<int64_t> first{n};
  ThreadPool::global().parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      if ((i & 4095) == 0 && first.load(std::memory_order_relaxed) < i0) return;
      if (bad(i)) {
        int64_t seen = first.load();
        while (i < seen && !first.compare_exchange_weak(seen, i)) {
        }
        return;
      }
    }
  });
  return first.load();
}

// "(r, c)" for element i of a row-major tensor of this shape, "i" for a vector.
std::string where(const Tensor& t, int64_t i) {
  if (t.shape.size() < 2) return fmt::format("index {}", i);
  return fmt::format("row {}, column {}", i / t.cols(), i % t.cols());
}

}  // namespace

std::optional<std::string> first_nonfinite(const Tensor& t) {
  ASCENT_CHECK(t.data != nullptr, "a tensor without data");
  const auto* bytes = static_cast<const uint8_t*>(t.data);
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::F32: {
      const int64_t i = first_bad(n, [&](int64_t k) { return f32_nonfinite(t.f32()[k]); });
      if (i == n) return std::nullopt;
      return fmt::format("the value at {} is {}", where(t, i), t.f32()[i]);
    }
    case DType::F16:
    case DType::BF16: {
      const bool half = t.dtype == DType::F16;
      const int64_t i = first_bad(n, [&](int64_t k) {
        const uint16_t h = u16_at(bytes + 2 * k);
        return half ? f16_nonfinite(h) : bf16_nonfinite(h);
      });
      if (i == n) return std::nullopt;
      const uint16_t h = u16_at(bytes + 2 * i);
      return fmt::format("the value at {} is {}", where(t, i), half ? f16_to_f32(h) : bf16_to_f32(h));
    }
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q6_K: {
      // Where each block keeps its f16 scales: d (and Q4_K's dmin right after it).
      const int64_t be = block_elems(t.dtype), bb = block_bytes(t.dtype);
      const int64_t d_at = t.dtype == DType::Q6_K ? static_cast<int64_t>(offsetof(BlockQ6_K, d)) : 0;
      const int scales = t.dtype == DType::Q4_K ? 2 : 1;
      const int64_t blocks = n / be;
      const int64_t i = first_bad(blocks, [&](int64_t b) {
        for (int s = 0; s < scales; ++s) {
          if (f16_nonfinite(u16_at(bytes + b * bb + d_at + 2 * s))) return true;
        }
        return false;
      });
      if (i == blocks) return std::nullopt;
      const int s = f16_nonfinite(u16_at(bytes + i * bb + d_at)) ? 0 : 1;
      const int64_t per_row = t.cols() / be, c0 = i % per_row * be;
      return fmt::format("the {} of block {} (row {}, columns {}-{}) is {}", s == 0 ? "scale d" : "minimum scale dmin",
                         i, i / per_row, c0, c0 + be - 1, f16_to_f32(u16_at(bytes + i * bb + d_at + 2 * s)));
    }
    case DType::I8:
    case DType::I4: {
      const int64_t rows = t.rows(), cols = t.cols();
      if (t.input_scale != nullptr) {
        const int64_t i = first_bad(cols, [&](int64_t k) { return f32_nonfinite(t.input_scale[k]); });
        if (i < cols) return fmt::format("the input scale of column {} is {}", i, t.input_scale[i]);
      }
      // Each real row's scales (an I4 matrix's padding rows up to its 16-row block hold scales no output uses).
      const int64_t groups = t.dtype == DType::I8 ? 1 : padded_cols(t.dtype, cols) / t.group;
      auto at = [&](int64_t i) { return t.dtype == DType::I8 ? i : int4_scale_index(groups, i / groups, i % groups); };
      const int64_t i = first_bad(rows * groups, [&](int64_t k) { return f32_nonfinite(t.scales[at(k)]); });
      if (i == rows * groups) return std::nullopt;
      if (t.dtype == DType::I8) return fmt::format("the scale of row {} is {}", i, t.scales[i]);
      const int64_t c0 = i % groups * t.group;
      return fmt::format("the scale of row {}, group {} (columns {}-{}) is {}", i / groups, i % groups, c0,
                         c0 + t.group - 1, t.scales[at(i)]);
    }
    case DType::I32:
      break;  // integers: no invalid values
  }
  return std::nullopt;
}

void check_tensor_values(const std::string& name, const Tensor& t, const std::string& file) {
  const auto bad = with_context(fmt::format("{}: tensor {}", file, name), [&] { return first_nonfinite(t); });
  if (bad) fail("{}: tensor {}: {}", file, name, *bad);
}

void check_weight_values(const WeightSet& w) {
  for (const auto& [name, t] : w.all()) check_tensor_values(name, t, w.file_of(name));
}

}  // namespace ascent::model
