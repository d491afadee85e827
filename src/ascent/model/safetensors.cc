#include "ascent/model/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstring>

#include "ascent/base/aligned.h"
#include "ascent/base/error.h"

namespace ascent::model {

SafetensorsLayout parse_safetensors(const std::string& path, std::span<const uint8_t> bytes) {
  ASCENT_CHECK(bytes.size() >= 8, "{}: truncated: {} bytes is too short for a safetensors header", path, bytes.size());
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  ASCENT_CHECK(header_len <= bytes.size() - 8, "{}: bad header: header length {} exceeds the file size {}", path,
               header_len, bytes.size());
  SafetensorsLayout l;
  try {
    l.header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(header_len));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad header JSON: {}", path, e.what());
  }
  ASCENT_CHECK(l.header.is_object(), "{}: bad header JSON: expected an object", path);
  l.data = bytes.data() + 8 + header_len;
  l.data_size = bytes.size() - 8 - header_len;
  return l;
}

void read_safetensors(const std::string& path, WeightSet& out,
                      const std::function<std::string(const std::string&)>& rename) {
  auto file = std::make_shared<MappedFile>(path);
  const SafetensorsLayout layout = parse_safetensors(path, file->bytes());
  const nlohmann::json& header = layout.header;
  const uint8_t* data = layout.data;
  const uint64_t data_size = layout.data_size;

  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string canonical = rename(name);
    if (canonical.empty()) continue;
    try {
      ASCENT_CHECK(
          info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
          "entry needs dtype, shape and data_offsets");
      const std::string dt = info["dtype"].get<std::string>();
      DType dtype;
      if (dt == "F32") {
        dtype = DType::F32;
      } else if (dt == "F16") {
        dtype = DType::F16;
      } else if (dt == "BF16") {
        dtype = DType::BF16;
      } else {
        fail("unsupported dtype {} (expected F32, F16 or BF16)", dt);
      }
      Shape shape;
      for (const auto& d : info["shape"]) {
        const int64_t v = d.get<int64_t>();
        ASCENT_CHECK(v >= 0, "negative dimension {}", v);
        shape.push_back(v);
      }
      const auto& off = info["data_offsets"];
      ASCENT_CHECK(off.is_array() && off.size() == 2, "data_offsets must be [begin, end]");
      const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
      ASCENT_CHECK(b <= e && e <= data_size, "offsets [{}, {}] out of range (data section is {} bytes)", b, e,
                   data_size);
      const int64_t expect = storage_bytes(dtype, numel(shape));
      ASCENT_CHECK(static_cast<int64_t>(e - b) == expect, "shape {} of {} needs {} bytes, offsets span {}",
                   shape_str(shape), dt, expect, e - b);
      Tensor t;
      t.dtype = dtype;
      t.shape = shape;
      t.data = data + b;
      if (reinterpret_cast<uintptr_t>(t.data) % block_bytes(dtype) != 0) {
        // Misaligned elements cannot be read in place on every path; keep an aligned copy instead.
        Tensor copy = make_owned(dtype, shape);
        std::memcpy(const_cast<void*>(copy.data), t.data, static_cast<size_t>(expect));
        t = copy;
      }
      out.add(canonical, t, path);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: tensor {}: bad header JSON: {}", path, name, e.what());
    } catch (const Error& e) {
      if (std::strncmp(e.what(), path.c_str(), path.size()) == 0) throw;
      fail("{}: tensor {}: {}", path, name, e.what());
    }
  }
  out.keep_file(file);
}

}  // namespace ascent::model
