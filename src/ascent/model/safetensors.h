// Reader for safetensors files (an 8-byte header length, a JSON header, then raw tensor bytes). Tensors of type
// F32, F16 and BF16 become views into the mapped file; every header field is checked against the file before use.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "ascent/model/weights.h"

namespace ascent::model {

// The parts of a safetensors file: its JSON header (an object; checked) and the data section after it.
struct SafetensorsLayout {
  nlohmann::json header;
  const uint8_t* data = nullptr;
  uint64_t data_size = 0;
};
// Parses the 8-byte header length and the header of a mapped file; errors name `path`.
SafetensorsLayout parse_safetensors(const std::string& path, std::span<const uint8_t> bytes);
// Reads only the header of the file at `path` (no mapping, no copy of the data), with parse_safetensors's checks.
nlohmann::json read_safetensors_header(const std::string& path);

// Maps `path` and adds each tensor to `out` under rename(name); tensors for which rename returns "" are skipped.
void read_safetensors(const std::string& path, WeightSet& out,
                      const std::function<std::string(const std::string&)>& rename);

}  // namespace ascent::model
