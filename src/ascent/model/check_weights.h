// The values of a model's weights, checked once: with `--check-tensors`, and always before `quantize` and `convert`
// write a new file. A NaN or an infinity in a weight is a damaged or badly converted file. Left alone, it surfaces only
// as logits that are not finite (engine::check_logits stops generation there), with no word of where.
// It refuses a NaN or an infinity in:
// - f32, f16 and bf16 values;
// - the f16 block scales of Q8_0 and Q4_0 (d), Q4_K (d and dmin) and Q6_K (d);
// - the f32 row or group scales and input scales of int8 and int4 matrices.
// Integer codes have no invalid values and are not read. It runs on the file's layouts, before a load repacks or
// splits any matrix (it refuses split ones).
#pragma once

#include <optional>
#include <string>

#include "ascent/model/weights.h"

namespace ascent::model {

// Throws "FILE: tensor NAME: <what> at <where> is <value>" for the first tensor (by name) holding a value that is
// not finite, naming the first such value in it. Threaded over each tensor's values or blocks.
void check_weight_values(const WeightSet& w);
// The same for one tensor (a plain one, in a file layout), named NAME in FILE.
void check_tensor_values(const std::string& name, const Tensor& t, const std::string& file);
// What check_tensor_values would report for t ("the value at row 3, column 5 is nan"), or nothing.
std::optional<std::string> first_nonfinite(const Tensor& t);

}  // namespace ascent::model
