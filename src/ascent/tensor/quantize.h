// Ascent's weight quantizers: f32 matrices (N, K) into the I8 and I4 formats the integer kernels run in place.
// Both are symmetric. I8 has one scale per output row; I4 one per group of 32, 64 or 128 columns of a row.
// An optional input_scale (K,) implements activation-aware scaling: the weight is divided by it column-wise
// before quantizing and the kernels multiply activations by it, so W x is unchanged while salient columns keep
// more precision. Refuses: other group sizes, non-2-D weights.
#pragma once

#include <cstdint>
#include <span>

#include "ascent/tensor/tensor.h"

namespace ascent {

// Quantizes w (N, K) of any float type. `clip` (N * groups,) optionally shrinks each group's range (AWQ's clip
// search): the scale is amax * clip / 127 (I8, per row) or signed-max * clip / -8 (I4), values saturating.
Tensor quantize_int8(const Tensor& w, std::span<const float> input_scale = {});
Tensor quantize_int4(const Tensor& w, int group, std::span<const float> input_scale = {},
                     std::span<const float> clip = {});

// Quantizes one group of f32 values to I4 codes q + 8 in [0, 15] and returns the scale (shared by the
// quantizer, its clip search and tests).
float quantize_int4_group(const float* x, int64_t n, float clip, uint8_t* codes);

// Storage a quantized tensor of this shape needs: data bytes and scale count (without input_scale).
int64_t int_weight_data_bytes(DType t, int64_t N, int64_t K);
int64_t int_weight_scale_count(DType t, int64_t N, int64_t K, int group);

// Checks a group size: 32, 64 or 128; throws naming the value otherwise.
void check_int4_group(int64_t group);

}  // namespace ascent
