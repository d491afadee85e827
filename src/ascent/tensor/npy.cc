#include "ascent/tensor/npy.h"

#include <cstdio>
#include <cstring>

#include "ascent/base/atomic_write.h"
#include "ascent/base/error.h"
#include "ascent/base/mapped_file.h"

namespace ascent {

Tensor read_npy(const std::string& path) {
  MappedFile f(path);
  const auto b = f.bytes();
  ASCENT_CHECK(b.size() >= 10 && std::memcmp(b.data(), "\x93NUMPY", 6) == 0, "{}: bad magic: not a .npy file", path);
  const int major = b[6];
  size_t hlen = 0, start = 0;
  if (major == 1) {
    hlen = static_cast<size_t>(b[8] | (b[9] << 8));
    start = 10;
  } else {
    ASCENT_CHECK(b.size() >= 12, "{}: truncated header", path);
    uint32_t h;
    std::memcpy(&h, b.data() + 8, 4);
    hlen = h;
    start = 12;
  }
  ASCENT_CHECK(start + hlen <= b.size(), "{}: truncated header", path);
  const std::string header(reinterpret_cast<const char*>(b.data() + start), hlen);
  // The header is a Python dict literal; read the two fields we need from it.
  auto field = [&](const char* key, char open, char close) {
    const size_t k = header.find(key);
    ASCENT_CHECK(k != std::string::npos, "{}: header has no {}", path, key);
    const size_t s = header.find(open, k + std::strlen(key));
    const size_t e = s == std::string::npos ? s : header.find(close, s + 1);
    ASCENT_CHECK(e != std::string::npos, "{}: malformed {} in header", path, key);
    return header.substr(s + 1, e - s - 1);
  };
  const std::string descr = field("'descr':", '\'', '\'');
  ASCENT_CHECK(header.find("'fortran_order': False") != std::string::npos, "{}: only C-order arrays are supported",
               path);
  Shape shape;
  const std::string dims = field("'shape':", '(', ')');
  for (size_t i = 0; i < dims.size();) {
    if (dims[i] < '0' || dims[i] > '9') {
      ++i;
      continue;
    }
    size_t used = 0;
    shape.push_back(std::stoll(dims.substr(i), &used));
    i += used;
  }
  DType dtype;
  if (descr == "<f4") {
    dtype = DType::F32;
  } else if (descr == "<f2") {
    dtype = DType::F16;
  } else if (descr == "<u2") {
    dtype = DType::BF16;
  } else if (descr == "<i4") {
    dtype = DType::I32;
  } else {
    fail("{}: unsupported dtype {}", path, descr);
  }
  Tensor t = make_owned(dtype, shape);
  const size_t n = static_cast<size_t>(t.nbytes());
  ASCENT_CHECK(start + hlen + n <= b.size(), "{}: truncated: {} data bytes expected", path, n);
  std::memcpy(const_cast<void*>(t.data), b.data() + start + hlen, n);
  return t;
}

void write_npy(const std::string& path, const Tensor& t) {
  ASCENT_CHECK(t.dtype == DType::F32 || t.dtype == DType::I32, "{}: only f32 and i32 arrays can be written", path);
  std::string dims;
  for (int64_t d : t.shape) dims += std::to_string(d) + ", ";
  std::string header = std::string("{'descr': '") + (t.dtype == DType::F32 ? "<f4" : "<i4") +
                       "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  const auto hlen = static_cast<uint16_t>(header.size());
  const char magic[] = {
      '\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<char>(hlen & 0xff), static_cast<char>(hlen >> 8)};
  write_file_atomic(path, {std::span<const char>(magic, sizeof(magic)), std::span<const char>(header),
                           std::span<const char>(static_cast<const char*>(t.data), static_cast<size_t>(t.nbytes()))});
}

}  // namespace ascent
