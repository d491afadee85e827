#include "ascent/tensor/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ascent/base/aligned.h"
#include "ascent/base/error.h"

namespace ascent {
namespace {

// One allocation holding data, then scales, then input_scale, so the tensor has a single owner like a mapped
// file has.
Tensor make_int_weight(DType t, int64_t N, int64_t K, int group, bool with_input_scale) {
  const int64_t data = (int_weight_data_bytes(t, N, K) + 63) / 64 * 64;
  const int64_t nscale = int_weight_scale_count(t, N, K, group);
  const int64_t bytes = data + nscale * 4 + (with_input_scale ? K * 4 : 0);
  auto buf = aligned_alloc_bytes(static_cast<size_t>(bytes));
  uint8_t* base = static_cast<uint8_t*>(buf.get());
  Tensor out;
  out.dtype = t;
  out.shape = {N, K};
  out.data = base;
  out.scales = reinterpret_cast<const float*>(base + data);
  out.input_scale = with_input_scale ? reinterpret_cast<const float*>(base + data + nscale * 4) : nullptr;
  out.group = group;
  out.owner = std::shared_ptr<const void>(buf.release(), AlignedDeleter{});
  return out;
}

void check_weight(const Tensor& w, std::span<const float> input_scale) {
  ASCENT_CHECK(w.shape.size() == 2, "quantize: weight must be 2-D, got {}", shape_str(w.shape));
  ASCENT_CHECK(input_scale.empty() || static_cast<int64_t>(input_scale.size()) == w.shape[1],
               "quantize: input_scale has {} values for {} columns", input_scale.size(), w.shape[1]);
}

// Row r of w divided column-wise by input_scale.
void scaled_row(const Tensor& w, int64_t r, std::span<const float> input_scale, float* dst) {
  row_to_f32(w, r, dst);
  for (size_t k = 0; k < input_scale.size(); ++k) dst[k] /= input_scale[k];
}

}  // namespace

void check_int4_group(int64_t group) {
  ASCENT_CHECK(group == 32 || group == 64 || group == 128, "int4 group size {} is not 32, 64 or 128", group);
}

int64_t int_weight_data_bytes(DType t, int64_t N, int64_t K) {
  return (t == DType::I4 ? int4_stored_rows(N) : N) * row_bytes(t, K);
}

int64_t int_weight_scale_count(DType t, int64_t N, int64_t K, int group) {
  if (t == DType::I8) return N;
  check_int4_group(group);
  return int4_stored_rows(N) * (padded_cols(t, K) / group);
}

Tensor quantize_int8(const Tensor& w, std::span<const float> input_scale) {
  check_weight(w, input_scale);
  const int64_t N = w.shape[0], K = w.shape[1];
  Tensor out = make_int_weight(DType::I8, N, K, 0, !input_scale.empty());
  auto* scales = const_cast<float*>(out.scales);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t r = 0; r < N; ++r) {
    scaled_row(w, r, input_scale, row.data());
    float amax = 0.0f;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    const float d = amax / 127.0f;
    const float id = inverse_scale(d);
    scales[r] = d;
    auto* q = const_cast<uint8_t*>(out.row_ptr(r));
    for (int64_t k = 0; k < K; ++k) {
      q[k] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::nearbyint(row[k] * id)), -127, 127) + 128);
    }
    std::fill(q + K, q + padded_cols(DType::I8, K), uint8_t{128});
  }
  if (!input_scale.empty()) std::copy(input_scale.begin(), input_scale.end(), const_cast<float*>(out.input_scale));
  return out;
}

float quantize_int4_group(const float* x, int64_t n, float clip, uint8_t* codes) {
  // The signed value of largest magnitude maps to -8 so the full 4-bit range is used on its side (as Q4_0).
  float amax = 0.0f, vmax = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      vmax = x[j];
    }
  }
  const float d = vmax * clip / -8.0f;
  const float id = inverse_scale(d);
  for (int64_t j = 0; j < n; ++j) {
    codes[j] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::nearbyint(x[j] * id)), -8, 7) + 8);
  }
  return d;
}

Tensor quantize_int4(const Tensor& w, int group, std::span<const float> input_scale, std::span<const float> clip) {
  check_weight(w, input_scale);
  check_int4_group(group);
  const int64_t N = w.shape[0], K = w.shape[1], Kp = padded_cols(DType::I4, K), G = Kp / group;
  ASCENT_CHECK(clip.empty() || static_cast<int64_t>(clip.size()) == N * G, "quantize: clip has {} values, need {}",
               clip.size(), N * G);
  Tensor out = make_int_weight(DType::I4, N, K, group, !input_scale.empty());
  auto* scales = const_cast<float*>(out.scales);
  auto* data = const_cast<uint8_t*>(static_cast<const uint8_t*>(out.data));
  // Rows past N (padding the last block of 16) hold code 8 (value 0) and scale 0.
  std::fill(data, data + out.nbytes(), uint8_t{0x88});
  std::fill(scales, scales + int_weight_scale_count(DType::I4, N, K, group), 0.0f);
  std::vector<float> row(static_cast<size_t>(Kp), 0.0f);
  std::vector<uint8_t> codes(static_cast<size_t>(Kp));
  for (int64_t r = 0; r < N; ++r) {
    scaled_row(w, r, input_scale, row.data());
    for (int64_t g = 0; g < G; ++g) {
      scales[int4_scale_index(G, r, g)] = quantize_int4_group(
          row.data() + g * group, group, clip.empty() ? 1.0f : clip[r * G + g], codes.data() + g * group);
    }
    for (int64_t k = 0; k < Kp; k += 8) {  // each byte: column k + j low, k + 4 + j high (dtype.h)
      for (int j = 0; j < 4; ++j) {
        data[int4_byte(Kp, r, k + j)] = static_cast<uint8_t>(codes[k + j] | (codes[k + 4 + j] << 4));
      }
    }
  }
  if (!input_scale.empty()) std::copy(input_scale.begin(), input_scale.end(), const_cast<float*>(out.input_scale));
  return out;
}

}  // namespace ascent
