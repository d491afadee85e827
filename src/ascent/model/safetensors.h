// Reader for safetensors files (an 8-byte header length, a JSON header, then raw tensor bytes). Tensors of type
// F32, F16 and BF16 become views into the mapped file; every header field is checked against the file before use.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "ascent/model/weights.h"

namespace ascent::model {

// Maps `path` and adds each tensor to `out` under rename(name); tensors for which rename returns "" are skipped.
void read_safetensors(const std::string& path, WeightSet& out,
                      const std::function<std::string(const std::string&)>& rename);

}  // namespace ascent::model
