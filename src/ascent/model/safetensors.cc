#include "ascent/model/safetensors.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "ascent/base/aligned.h"
#include "ascent/base/error.h"
#include "ascent/base/json_number.h"

namespace ascent::model {

namespace {

// The checks on the 8-byte header length, against the file's size, that both readers below make.
uint64_t header_length(const std::string& path, const uint8_t* first8, uint64_t file_size) {
  ASCENT_CHECK(file_size >= 8, "{}: truncated: {} bytes is too short for a safetensors header", path, file_size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, first8, 8);
  ASCENT_CHECK(header_len <= file_size - 8, "{}: bad header: header length {} exceeds the file size {}", path,
               header_len, file_size);
  // The safetensors library's own limit (HeaderTooLarge): a damaged length within a large file would otherwise be
  // read, and parsed, as gigabytes of JSON.
  constexpr uint64_t kMaxHeader = 100'000'000;
  ASCENT_CHECK(header_len <= kMaxHeader, "{}: bad header: header length {} exceeds the format's limit of {} bytes",
               path, header_len, kMaxHeader);
  return header_len;
}

nlohmann::json parse_header(const std::string& path, std::span<const uint8_t> text) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad header JSON: {}", path, e.what());
  }
  ASCENT_CHECK(header.is_object(), "{}: bad header JSON: expected an object", path);
  return header;
}

}  // namespace

SafetensorsLayout parse_safetensors(const std::string& path, std::span<const uint8_t> bytes) {
  const uint64_t header_len = header_length(path, bytes.data(), bytes.size());
  SafetensorsLayout l;
  l.header = parse_header(path, bytes.subspan(8, header_len));
  l.data = bytes.data() + 8 + header_len;
  l.data_size = bytes.size() - 8 - header_len;
  return l;
}

nlohmann::json read_safetensors_header(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (f == nullptr) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) fail("{}: cannot stat: {}", path, ec.message());
  uint8_t first8[8] = {};
  if (size >= 8 && std::fread(first8, 1, 8, f.get()) != 8) fail("{}: read failed in the header length", path);
  const uint64_t header_len = header_length(path, first8, size);
  std::vector<uint8_t> text(static_cast<size_t>(header_len));
  if (std::fread(text.data(), 1, text.size(), f.get()) != text.size()) fail("{}: read failed in the header", path);
  return parse_header(path, text);
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
        const int64_t v = json_int(d, "shape");
        // A weight has elements in every dimension: a 0 (a damaged file's (64, 0)) reached Tensor::rows(), which
        // divides by the last one.
        ASCENT_CHECK(v > 0, "dimension {} is not positive", v);
        shape.push_back(v);
      }
      const auto& off = info["data_offsets"];
      ASCENT_CHECK(off.is_array() && off.size() == 2, "data_offsets must be [begin, end]");
      const uint64_t b = json_uint(off[0], "data_offsets"), e = json_uint(off[1], "data_offsets");
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
